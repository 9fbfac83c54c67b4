"""Health figures read from the ledger tables, for ``call4agents stats`` and the OTel gauges.

Reads only, but for one write: all-time figures first fold the changes logged since the last
read into the tallies (see ``_tally``); where that write is refused (a read-only database user,
a read-only file), they are counted from every action instead. Times come from the database's
clock, like everything else in the ledger.

How often deduplication fired comes from ``c4a_dedup_hits``: repeats are counted in memory and
added there every few seconds (see ``_hits``), so the last few seconds may not show yet.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from call4agents.model.errors import LedgerError
from call4agents.storage import _run_tally, _tally, dead_letters, stat_rows
from call4agents.storage.run_rows import COMPLETED_AT, READS, TOOL_CALLS, TRIGGER
from call4agents.storage.store import Conn

if TYPE_CHECKING:
    from call4agents.engine.ledger import LedgerCore

DEDUP_NOTE = (
    "repeats served from the record, over repeats plus executions; counted in memory and "
    "written every few seconds, so the last seconds may not show yet"
)
# Runs listed by irreversible executions: a ledger may hold millions of runs, and a figure read
# every few seconds lists the ones worth a look (the total counts them all).
IRREVERSIBLE_RUNS = 20
# A run's state: the ending a run control recorded (escalated, undone, partly_undone), else
# derived from its actions, the first that applies in this order.
RUN_STATES = ("in_doubt", "running", "waiting_approval", "has_failures", "done")


@dataclass(frozen=True)
class OpenFigures:
    """What is open right now, whatever its age."""

    in_doubt: int
    in_doubt_oldest_age: float | None
    approvals_waiting: int
    approvals_oldest_age: float | None


@dataclass(frozen=True)
class Stats:
    since_seconds: float | None
    actions: int
    actions_by_state: dict[str, int]
    retried_actions: int  # actions that needed more than one attempt
    executions: int  # attempts started: each ran (or began to run) the tool
    deduped: int  # repeats served from the record instead of running the tool again
    dedup_rate: float | None
    dedup_note: str
    in_doubt: int
    in_doubt_oldest_age: float | None
    approvals_waiting: int
    approvals_oldest_age: float | None
    irreversible_executions: int  # attempts of irreversible tools, as ``executions`` counts them
    # The runs with the most irreversible executions, at most IRREVERSIBLE_RUNS, most first.
    irreversible_per_run: dict[str, int] = field(default_factory=dict)
    runs_by_state: dict[str, int] = field(default_factory=dict)
    # Webhook events given up on and not yet replayed (``call4agents webhooks``), whatever age.
    webhooks_dead: int = 0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def open_figures(ledger: LedgerCore) -> OpenFigures:
    """In-doubt actions and approvals waiting now, with the age of the oldest of each."""
    now, doubt, doubt_since, waiting, asked = stat_rows.open_now(ledger.store)
    return OpenFigures(
        doubt,
        None if doubt_since is None else max(0.0, now - float(doubt_since)),
        waiting,
        None if asked is None else max(0.0, now - float(asked)),
    )


@dataclass(frozen=True)
class _Counts:
    """The figures that read actions: from the tallies (all time) or the window's rows."""

    by_state: dict[str, int]
    retried: int
    executions: int
    irreversible: int
    irreversible_per_run: dict[str, int]
    runs_by_state: dict[str, int]


def window_start(now: float, since: float) -> float:
    """Where a window of the last ``since`` seconds begins: at the whole minute, so its figures
    are sums of the timeline's minute and hour rows (at most a minute more than asked)."""
    return math.floor((now - since) / 60) * 60.0


def compute(ledger: LedgerCore, since: float | None = None) -> Stats:
    """Figures for actions first attempted in the last ``since`` seconds (all time if None),
    the window starting at a whole minute (``window_start``).

    Open figures (in doubt, approvals waiting) count everything open, whatever its age. All-time
    figures come from tallies kept as actions change, a window's from the same tallies kept by
    minute and by hour (see ``_tally``), so either costs the same at any ledger size.
    """
    ledger.sweep()  # a dead worker's action counts as in doubt, not running
    now = ledger.store.now()
    start = None if since is None else window_start(now, since)
    counts = _all_time(ledger, now) if start is None else _since(ledger, now, start)
    minute = None if start is None else int(start // 60)
    deduped = stat_rows.deduped(ledger.store, minute)
    opened = open_figures(ledger)
    executions = counts.executions
    return Stats(
        since_seconds=since,
        actions=sum(counts.by_state.values()),
        actions_by_state=counts.by_state,
        retried_actions=counts.retried,
        executions=executions,
        deduped=deduped,
        dedup_rate=deduped / (deduped + executions) if deduped + executions else None,
        dedup_note=DEDUP_NOTE,
        in_doubt=opened.in_doubt,
        in_doubt_oldest_age=opened.in_doubt_oldest_age,
        approvals_waiting=opened.approvals_waiting,
        approvals_oldest_age=opened.approvals_oldest_age,
        irreversible_executions=counts.irreversible,
        irreversible_per_run=counts.irreversible_per_run,
        runs_by_state=counts.runs_by_state,
        webhooks_dead=dead_letters.count_waiting(ledger.store),
    )


def _all_time(ledger: LedgerCore, now: float) -> _Counts:
    """From the tallies, after folding in the changes not yet counted. Reads only what is open
    (actions started or in doubt, approvals waiting) and runs ended by a run control."""
    try:
        return stat_rows.after_folding(ledger.store, lambda conn: _from_tallies(conn, now))
    except LedgerError:
        return _from_rows(ledger, now, None)  # may not write here: count every action


def _since(ledger: LedgerCore, now: float, start: float) -> _Counts:
    """From the timeline, after folding; the window's rows where the fold may not run."""
    try:
        return stat_rows.after_folding(ledger.store, lambda conn: _from_timeline(conn, now, start))
    except LedgerError:
        return _from_rows(ledger, now, start)


def _from_tallies(conn: Conn, now: float) -> _Counts:
    total = _tally.read(conn)
    runs = _runs_in_states(conn, now, None, total.get("runs", 0), total.get("runs_failed", 0))
    return _tallied(total, _tally.irreversible_per_run(conn, IRREVERSIBLE_RUNS), runs)


def _from_timeline(conn: Conn, now: float, start: float) -> _Counts:
    """A window's figures: the timeline's sums, and the runs with an action first attempted in
    it (their count is the window's, not the ledger's), counted by the database."""
    runs, failed = _tally.count_runs_since(conn, start)
    return _tallied(
        stat_rows.timeline_totals(conn, start),
        _tally.irreversible_per_run(conn, IRREVERSIBLE_RUNS, since=start),
        _runs_in_states(conn, now, start, runs, failed),
    )


def _runs_in_states(
    conn: Conn, now: float, start: float | None, runs: int, failed: int
) -> Counter[str]:
    """``runs`` runs (``failed`` of them with a failed action) with an action first attempted at
    ``start`` or later (all if None), by state. Runs with an open action, waiting on a ticket or
    ended by a control are judged one by one; every other run is done or has failures, as the
    counts say. Waiting runs may be thousands: the database matches them to their tallies in
    one read, and no other run is read."""
    seen, endings = _open_actions(conn), stat_rows.endings(conn)
    waiting = _tally.runs_among(conn, stat_rows.pending_runs(now), since=start)
    others = _tally.runs_of(conn, (set(seen) | set(endings)) - set(waiting))
    known = {r: t for r, t in others.items() if _tally.active_since(t, start)} | waiting
    found = _judged(known, seen, set(waiting), endings)
    failed_rest = failed - sum(run.failed > 0 for run in known.values())
    found["has_failures"] += failed_rest
    found["done"] += runs - len(known) - failed_rest
    return found


def _open_actions(conn: Conn) -> dict[str, set[str]]:
    """The states of each run's open actions (started or in doubt)."""
    seen: dict[str, set[str]] = {}
    for run_id, state in stat_rows.open_actions(conn):
        seen.setdefault(run_id, set()).add(state)
    return seen


def _judged(
    runs: dict[str, _tally.RunTally],
    seen: dict[str, set[str]],
    waiting: set[str],
    endings: dict[str, str],
) -> Counter[str]:
    found: Counter[str] = Counter()
    for run_id, run in runs.items():
        states = seen.get(run_id, set()) | ({"failed"} if run.failed else set())
        found[endings.get(run_id) or _run_state(states, run_id in waiting)] += 1
    return found


def _tallied(
    total: Counter[str] | dict[str, int], per_run: dict[str, int], runs: Counter[str]
) -> _Counts:
    by_state = {s: total.get("actions:" + s, 0) for s in _tally.STATES}
    return _Counts(
        by_state={s: n for s, n in by_state.items() if n},
        retried=total.get("retried", 0),
        executions=total.get("executions", 0),
        irreversible=total.get("irreversible", 0),
        irreversible_per_run=per_run,
        runs_by_state={s: n for s, n in sorted(runs.items()) if n},
    )


def _from_rows(ledger: LedgerCore, now: float, start: float | None) -> _Counts:
    """From the actions first attempted at ``start`` or later (every action if None), row by
    row: for a database user that may not fold. An action created in the window was also last
    changed in it, so the read is bounded by the index on ``updated_at``, not the ledger."""
    rows, endings, waiting_runs = stat_rows.window(ledger.store, now, start)
    # Every attempt of an irreversible tool, whatever came of it: one that failed still called
    # the tool, as the irreversible-executions metric counts it.
    irreversible: Counter[str] = Counter()
    for r in rows:
        if r.kind == "irreversible" and r.attempt:
            irreversible[r.run_id] += r.attempt
    return _Counts(
        by_state=dict(Counter(r.state for r in rows)),
        retried=sum(r.attempt > 1 for r in rows),
        executions=sum(r.attempt for r in rows),
        irreversible=sum(irreversible.values()),
        irreversible_per_run=_most(irreversible, IRREVERSIBLE_RUNS),
        runs_by_state=_runs_by_state(rows, waiting_runs, endings),
    )


def _most(counts: Counter[str], limit: int) -> dict[str, int]:
    """The ``limit`` largest counts, largest first (ties by run id, last first), as the
    tallies' index gives them."""
    return dict(sorted(counts.items(), key=lambda item: (item[1], item[0]), reverse=True)[:limit])


def _runs_by_state(
    rows: Sequence[Any], waiting_runs: set[str], endings: dict[str, str]
) -> dict[str, int]:
    states: dict[str, set[str]] = {}
    for r in rows:
        states.setdefault(r.run_id, set()).add(r.state)
    found: Counter[str] = Counter()
    for run_id, seen in states.items():
        found[endings.get(run_id) or _run_state(seen, run_id in waiting_runs)] += 1
    return dict(sorted(found.items()))


def _run_state(seen: set[str], waiting: bool) -> str:
    if "in_doubt" in seen:
        return "in_doubt"
    if "started" in seen:
        return "running"
    if waiting:
        return "waiting_approval"
    return "has_failures" if "failed" in seen else "done"


def render(stats: Stats) -> str:
    """The figures as a few readable lines."""
    window = "all time" if stats.since_seconds is None else f"last {_age(stats.since_seconds)}"
    by_state = ", ".join(f"{n} {s}" for s, n in sorted(stats.actions_by_state.items())) or "none"
    per_run = ", ".join(f"{run}: {n}" for run, n in sorted(stats.irreversible_per_run.items()))
    runs = ", ".join(f"{n} {s}" for s, n in stats.runs_by_state.items()) or "none"
    lines = [
        f"Window: {window}",
        f"Actions:                  {stats.actions} ({by_state}); {stats.retried_actions} retried",
        f"Dedup rate:               {_rate(stats)}",
        f"In doubt (open):          {stats.in_doubt}{_oldest(stats.in_doubt_oldest_age)}",
        f"Approvals waiting:        {stats.approvals_waiting}{_oldest(stats.approvals_oldest_age)}",
        f"Irreversible executions:  {stats.irreversible_executions}"
        + (f" ({per_run})" if per_run else ""),
        f"Runs:                     {runs}",
    ]
    if stats.webhooks_dead:
        lines.append(
            f"Webhooks given up:        {stats.webhooks_dead} (`call4agents webhooks --replay`)"
        )
    return "\n".join(lines)


def _rate(stats: Stats) -> str:
    if stats.dedup_rate is None:
        return "n/a (nothing ran or repeated in this window)"
    return (
        f"{stats.dedup_rate:.1%} ({stats.deduped} served from the record, "
        f"{stats.executions} executed)"
    )


def _oldest(age: float | None) -> str:
    return "" if age is None else f", oldest {_age(age)}"


def _age(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f}{unit}"
    return f"{seconds:.0f}s"


# -- figures the shipped alerts watch (alerts/call4agents.rules.yml) -----------------------------


def open_escalations(ledger: LedgerCore) -> tuple[int, float | None]:
    """Escalated runs nobody has picked up yet, and the age of the oldest.

    Picked up means the run was entered again after it was escalated (a person resuming it),
    or a later control (an undo) changed its ending.
    """
    now, count, oldest = stat_rows.open_escalations(ledger.store)
    return count, None if oldest is None else max(0.0, now - float(oldest))


@dataclass(frozen=True)
class AlertFigures:
    """The figures behind the shipped alerts and recording rules, from the ledger."""

    irreversible_executions: int
    dedup_rate: float | None
    escalations_open: int
    escalations_oldest_age: float | None
    runs_completed: int
    runs_completed_without_read: int
    without_read_share: float | None
    cost_per_run_p95: float | None
    cost_per_run_p99: float | None
    tool_calls_per_run_p95: float | None
    runs_by_trigger: dict[str, int] = field(default_factory=dict)
    runs_by_ending: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class _RunFigures:
    completed: int
    without_read: int
    cost_p95: float | None
    cost_p99: float | None
    calls_p95: float | None
    triggers: dict[str, int]


def alert_figures(ledger: LedgerCore, stats: Stats, since: float | None = None) -> AlertFigures:
    """The alerts' figures for runs active in the last ``since`` seconds (all time if None).

    Cost per run is what a budget's counters recorded (runs without a budget have no cost);
    its quantiles are given to two significant figures. A run counts once however many times
    it was entered. All time, the figures come from tallies kept as run counters change (see
    ``_run_tally``); a window reads the counters of the runs entered in it.
    """
    runs = _every_run(ledger) if since is None else _runs_entered(ledger, since)
    endings_done = _endings_by_status(ledger, since)
    if runs.completed:
        endings_done["completed"] = runs.completed
    escalations, oldest = open_escalations(ledger)
    return AlertFigures(
        irreversible_executions=stats.irreversible_executions,
        dedup_rate=stats.dedup_rate,
        escalations_open=escalations,
        escalations_oldest_age=oldest,
        runs_completed=runs.completed,
        runs_completed_without_read=runs.without_read,
        without_read_share=runs.without_read / runs.completed if runs.completed else None,
        cost_per_run_p95=runs.cost_p95,
        cost_per_run_p99=runs.cost_p99,
        tool_calls_per_run_p95=runs.calls_p95,
        runs_by_trigger=dict(sorted(runs.triggers.items())),
        runs_by_ending=dict(sorted(endings_done.items())),
    )


def _every_run(ledger: LedgerCore) -> _RunFigures:
    """Every run's figures from the run tallies, after folding in the counter changes not yet
    counted (see ``_run_tally``): a few dozen rows at any number of runs. Where the fold may
    not run (a read-only database user), the database counts them over the counters' value
    index instead, which grows with the runs. Cost quantiles are to two significant figures
    either way, as the tallies file costs."""
    try:
        return stat_rows.after_folding(ledger.store, _from_run_tallies)
    except LedgerError:
        with ledger.store.read() as conn:  # may not write here: count over the index
            return _counted_runs(conn)


def _from_run_tallies(conn: Conn) -> _RunFigures:
    found = _run_tally.read(conn)
    return _RunFigures(
        found.completed,
        found.completed - found.with_read,
        _run_tally.quantile(found.costs, 0.95),
        _run_tally.quantile(found.costs, 0.99),
        _run_tally.quantile(found.tool_calls, 0.95),
        found.triggers,
    )


def _counted_runs(conn: Conn) -> _RunFigures:
    completed, with_read = stat_rows.completions(conn)
    cost_p95, cost_p99 = stat_rows.counter_quantiles(conn, _run_tally.COST, (0.95, 0.99))
    (calls_p95,) = stat_rows.counter_quantiles(conn, TOOL_CALLS, (0.95,))
    triggers = stat_rows.trigger_counts(conn)
    return _RunFigures(
        completed,
        completed - with_read,
        _two_figures(cost_p95),
        _two_figures(cost_p99),
        calls_p95,
        triggers,
    )


def _two_figures(value: float | None) -> float | None:
    return None if value is None else _run_tally.two_figures(value)


def _runs_entered(ledger: LedgerCore, since: float) -> _RunFigures:
    """From each counter of the runs entered (or budgeted) in the window; cost quantiles to two
    significant figures, as all-time ones are (rounding keeps the order, so this is the
    quantile of the rounded costs)."""
    counters: dict[str, dict[str, float]] = {}
    for run_id, name, value in stat_rows.run_counters_active(ledger.store, since):
        counters.setdefault(run_id, {})[name] = value
    completed = [r for r, v in counters.items() if COMPLETED_AT in v]
    costs = sorted(v["cost"] for v in counters.values() if "cost" in v)
    calls = sorted(v[TOOL_CALLS] for v in counters.values() if TOOL_CALLS in v)
    triggers = Counter(
        name[len(TRIGGER) :] for v in counters.values() for name in v if name.startswith(TRIGGER)
    )
    return _RunFigures(
        len(completed),
        sum(not counters[r].get(READS) for r in completed),
        _two_figures(_quantile(costs, 0.95)),
        _two_figures(_quantile(costs, 0.99)),
        _quantile(calls, 0.95),
        dict(triggers),
    )


def _endings_by_status(ledger: LedgerCore, since: float | None) -> Counter[str]:
    """Endings recorded by run controls (escalated, a budget limit, undone) in the window."""
    return Counter(dict(stat_rows.endings_by_status(ledger.store, since)))


def _quantile(values: Sequence[float], q: float) -> float | None:
    """The nearest-rank quantile of sorted ``values``."""
    if not values:
        return None
    return values[min(len(values) - 1, max(0, math.ceil(q * len(values)) - 1))]


def render_alerts(figures: AlertFigures) -> str:
    """The alerts' figures as readable lines, under ``render``'s."""
    share = figures.without_read_share
    lines = [
        f"Escalations open:         {figures.escalations_open}"
        f"{_oldest(figures.escalations_oldest_age)}",
        f"Completed without a read: {figures.runs_completed_without_read} of "
        f"{figures.runs_completed} completed runs"
        + ("" if share is None else f" ({share:.1%}; claims without evidence?)"),
        f"Cost per run:             p95 {_num(figures.cost_per_run_p95)}, "
        f"p99 {_num(figures.cost_per_run_p99)} (runs with a budget)",
        f"Tool calls per run:       p95 {_num(figures.tool_calls_per_run_p95)}",
        "Runs by trigger:          "
        + (", ".join(f"{n} {t}" for t, n in figures.runs_by_trigger.items()) or "none given"),
        "Runs by ending:           "
        + (", ".join(f"{n} {t}" for t, n in figures.runs_by_ending.items()) or "none"),
    ]
    return "\n".join(lines)


def _num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4g}"


# -- figures over time (the console's health charts) ---------------------------------------------


@dataclass(frozen=True)
class Bucket:
    """The figures of one stretch of time, ``start`` to ``end`` (database epoch seconds).

    Counts (executions, repeats, endings, cost) are of what happened in the bucket; the open
    figures (in doubt, approvals waiting, escalations) are as they stood at its end.
    """

    start: float
    end: float
    executions: int
    irreversible_executions: int
    unapproved_executions: int
    deduped: int
    dedup_rate: float | None
    in_doubt_open: int
    approvals_waiting: int
    approvals_oldest_age: float | None
    escalations_open: int
    escalations_oldest_age: float | None
    runs_ended: dict[str, int]
    cost_per_run_p95: float | None
    cost_per_run_p99: float | None


@dataclass(frozen=True)
class Series:
    since_seconds: float
    bucket_seconds: float
    buckets: list[Bucket]
    # Actions executed without a yes over all time (``unapproved_executions(ledger)``), when
    # asked for with ``ever=True``: found in the same pass as the window's.
    unapproved_ever: int | None = None

    @property
    def unapproved_executions(self) -> int:
        return sum(b.unapproved_executions for b in self.buckets)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def series(ledger: LedgerCore, since: float, buckets: int = 24, *, ever: bool = False) -> Series:
    """The health figures of the last ``since`` seconds in ``buckets`` equal stretches, each a
    whole number of minutes (of hours, when it is an hour or more) and starting at a whole one,
    the last one up to now.

    Every read is bounded by the window, not the ledger: executions and doubt from the
    timeline's minute or hour rows (see ``_tally``), tickets through the pending index's
    ``expires_at`` and each ticket's action by its key, repeats through the minute index, runs
    completed through the counters' value index, and cost from the counters of the runs
    completed or acting in the window. Open doubt at each bucket's end is what is open now less
    what fell in doubt since, plus what left it since. An escalation is open from when it was
    made until the run was first entered again (picked up); one whose ending a later control
    replaced (an undo) leaves the chart. ``ever``: also count the actions executed without a
    yes over all time, in the pass that finds the window's (it then asks every ticket ever
    opened, not only those open in the window).
    """
    if since <= 0 or buckets < 1:
        raise ValueError("series needs a window over 0 seconds and at least one bucket")
    ledger.sweep()  # a dead worker's action counts as in doubt, not running
    now = ledger.store.now()
    width = max(60, math.ceil(since / buckets / 60) * 60)
    step = 3600 if width % 3600 == 0 else 60
    last = math.ceil(now / step) * step
    edges = [float(last - (buckets - i) * width) for i in range(buckets + 1)]

    def read(conn: Conn) -> tuple[int | None, list[Bucket]]:
        if ever:
            count, unapproved = stat_rows.unapproved_ever_and_since(conn, edges[0])
        else:
            count, unapproved = None, stat_rows.unapproved_since(conn, edges[0])
        return count, _over_time(conn, now, step, edges, unapproved)

    try:
        count, found = stat_rows.after_folding(ledger.store, read)
    except LedgerError:
        with ledger.store.read() as conn:  # may not fold here: as of the last fold
            count, found = read(conn)
    return Series(since, float(width), found, unapproved_ever=count)


def _over_time(
    conn: Conn, now: float, step: int, edges: list[float], unapproved: Sequence[float]
) -> list[Bucket]:
    start, width, n = edges[0], edges[1] - edges[0], len(edges) - 1
    ends = [min(edge, now) for edge in edges[1:]]

    def slot(at: float) -> int:
        return min(n - 1, max(0, int((at - start) // width)))

    def slots(times: Sequence[float]) -> Counter[int]:
        """How many of ``times`` fall in each bucket: one pass, no call per time (thousands of
        runs complete in a week)."""
        found: Counter[int] = Counter()
        for i, k in Counter(int((at - start) // width) for at in times).items():
            found[min(n - 1, max(0, i))] += k
        return found

    executions, irreversible, bad, deduped, doubt_moved = ([0] * n for _ in range(5))
    for at, name, value in _tally.timeline_between(conn, step, int(start), None):
        if name == "executions":
            executions[slot(at)] += value
        elif name == "irreversible":
            irreversible[slot(at)] += value
        elif name in (_tally.DOUBT_IN, _tally.DOUBT_OUT):
            doubt_moved[slot(at)] += value if name == _tally.DOUBT_IN else -value
    for at in unapproved:
        bad[slot(at)] += 1
    for i, hits in stat_rows.hits_by_slot(conn, int(start), int(width)):
        deduped[min(n - 1, max(0, i))] += hits
    ended: list[Counter[str]] = [Counter() for _ in range(n)]
    for status, at in stat_rows.endings_since(conn, start):
        ended[slot(at)][status] += 1
    completions = stat_rows.completions_since(conn, start)
    for i, k in slots([at for at, _ in completions]).items():
        ended[i]["completed"] += k
    costs: list[list[float]] = [[] for _ in range(n)]
    priced = [(at, cost) for at, cost in completions if cost is not None]
    for at, cost in priced + stat_rows.acting_costs_since(conn, start):
        i = int((at - start) // width)
        costs[i if 0 <= i < n else min(n - 1, max(0, i))].append(cost)
    waiting_at = _waiting_at(stat_rows.waiting_groups(conn, start, ends), len(ends))
    escalated = stat_rows.escalations_made(conn)
    # Open doubt at a bucket's end: open now, less what fell in doubt after it, plus what left.
    doubt_open = [stat_rows.count_in_doubt(conn)] * n
    for i in range(n - 2, -1, -1):
        doubt_open[i] = doubt_open[i + 1] - doubt_moved[i + 1]
    found = []
    for i, end in enumerate(ends):
        waiting, oldest = waiting_at[i]
        open_esc = [made for made, up in escalated if made <= end and (up is None or up > end)]
        spent = sorted(costs[i])
        tried = executions[i] + deduped[i]
        found.append(
            Bucket(
                start=edges[i],
                end=end,
                executions=executions[i],
                irreversible_executions=irreversible[i],
                unapproved_executions=bad[i],
                deduped=deduped[i],
                dedup_rate=deduped[i] / tried if tried else None,
                in_doubt_open=doubt_open[i],
                approvals_waiting=waiting,
                approvals_oldest_age=None if oldest is None else end - oldest,
                escalations_open=len(open_esc),
                escalations_oldest_age=end - min(open_esc) if open_esc else None,
                runs_ended=dict(sorted(ended[i].items())),
                cost_per_run_p95=_two_figures(_quantile(spent, 0.95)),
                cost_per_run_p99=_two_figures(_quantile(spent, 0.99)),
            )
        )
    return found


def unapproved_executions(ledger: LedgerCore, since: float | None = None) -> int:
    """Actions that needed a person's yes and started without one, first attempted in the last
    ``since`` seconds (all time if None). Must stay 0.

    Needed a yes: a ticket was opened for the action. Without one: its latest attempt started
    with no ticket approved for that attempt (an approved ticket is spent as the attempt starts).
    The ledger cannot see a tool that needed a yes and never asked; the
    ``call4agents.unapproved.executions`` metric, counted where the tool runs, sees that too.
    """
    start = None if since is None else window_start(ledger.store.now(), since)
    with ledger.store.read() as conn:
        return len(stat_rows.unapproved_since(conn, start))


def _waiting_at(
    groups: list[tuple[int, int, int, float]], n: int
) -> list[tuple[int, float | None]]:
    """How many tickets waited at each of ``n`` bucket ends, and since when the oldest did,
    from ``stat_rows.waiting_groups``: a group's tickets waited at the ends from its first
    count up to the one before its second. Counted with a difference array, so ten thousand
    tickets cost what their few groups do, at 12 buckets or 28."""
    delta = [0] * (n + 1)
    for first, after, count, _asked in groups:
        if first < after:
            delta[first] += count
            delta[after] -= count
    found: list[tuple[int, float | None]] = []
    count = 0
    for i in range(n):
        count += delta[i]
        waiting = [asked for first, after, _n, asked in groups if first <= i < after]
        found.append((count, min(waiting) if waiting else None))
    return found
