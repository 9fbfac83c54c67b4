"""Health figures for ``call4agents stats``, the console's health page and the OTel gauges.

What happened (actions by state, executions, repeats, runs and their figures) comes from one
place, the tallies (``storage.tally``): all time, or summed over a window's minutes and hours.
What is open now (in doubt, tickets waiting, escalations) and a window's runs and tickets are read
through indexes (``storage.stat_rows``). Reading first folds the changes logged since the last
read into the tallies, which is a write; where that write is refused (a read-only database user,
a read-only file), the figures are as of the last fold, and say how many changes wait. Times come
from the database's clock, like everything else in the ledger.

Repeats are counted in memory and logged every few seconds (see ``tally.DedupCounter``), so
the last few seconds may not show yet.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Collection, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

from call4agents.model.ages import age
from call4agents.storage import dead_letters, stat_rows, tally
from call4agents.storage.run_rows import COMPLETED_AT, READS, TOOL_CALLS, TRIGGER
from call4agents.storage.store import Conn

if TYPE_CHECKING:
    from call4agents.engine.ledger_core import LedgerCore

DEDUP_NOTE = (
    "repeats served from the record, over repeats plus executions; counted in memory and "
    "written every few seconds, so the last seconds may not show yet"
)
# Runs listed by irreversible executions: a ledger may hold millions of runs, and a figure read
# every few seconds lists the ones worth a look (the total counts them all).
IRREVERSIBLE_RUNS = 20


@dataclass(frozen=True)
class OpenFigures:
    """What is open right now, whatever its age, with the age of the oldest of each: the
    figures ``stats``, the console's health page and the OTel gauges show."""

    in_doubt: int
    in_doubt_oldest_age: float | None
    approvals_waiting: int
    approvals_oldest_age: float | None
    # Escalated runs nobody has picked up yet: picked up means the run was entered again after
    # it was escalated (a person resuming it), or a later control (an undo) changed its ending.
    escalations_open: int
    escalations_oldest_age: float | None


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
    # Changes logged since the last fold, left out: this database user may not fold them.
    changes_not_counted: int = 0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def open_figures(ledger: LedgerCore) -> OpenFigures:
    """In-doubt actions, approvals waiting and escalations open now, and the oldest's ages."""
    now, (doubt, doubt_since), (waiting, asked), (escalated, made) = stat_rows.open_now(
        ledger.store
    )

    def waited(since: Any) -> float | None:
        return None if since is None else max(0.0, now - float(since))

    return OpenFigures(doubt, waited(doubt_since), waiting, waited(asked), escalated, waited(made))


def window_start(now: float, since: float) -> float:
    """Where a window of the last ``since`` seconds begins: at the whole minute, so its figures
    are sums of the tallies' minute and hour rows (at most a minute more than asked)."""
    return math.floor((now - since) / 60) * 60.0


def compute(ledger: LedgerCore, since: float | None = None) -> Stats:
    """Figures for actions first attempted in the last ``since`` seconds (all time if None),
    the window starting at a whole minute (``window_start``).

    Open figures (in doubt, approvals waiting) count everything open, whatever its age. The rest
    come from the tallies kept as actions change, all time or by minute and by hour (see
    ``tally``), so they cost the same at any ledger size.
    """
    ledger.sweep()  # a dead worker's action counts as in doubt, not running
    now = ledger.store.now()
    start = None if since is None else window_start(now, since)
    opened, dead = open_figures(ledger), dead_letters.count_waiting(ledger.store)

    def counted(conn: Conn) -> Stats:
        """The tallies all time or from ``start``, and the runs with an action first attempted
        in the window (their count is the window's, not the ledger's), counted by the database.
        Reads only what is open (actions started or in doubt, approvals waiting) and runs ended
        by a run control beside them."""
        total = tally.totals(conn, start)
        if start is None:
            runs, failed = total["runs"], total["runs_failed"]
        else:
            runs, failed = tally.count_runs_since(conn, start)
        by_state = {s: n for s in tally.STATES if (n := total["actions:" + s])}
        executions, deduped = total["executions"], total[tally.DEDUPED]
        return Stats(
            since_seconds=since,
            actions=sum(by_state.values()),
            actions_by_state=by_state,
            retried_actions=total["retried"],
            executions=executions,
            deduped=deduped,
            dedup_rate=deduped / (deduped + executions) if deduped + executions else None,
            dedup_note=DEDUP_NOTE,
            in_doubt=opened.in_doubt,
            in_doubt_oldest_age=opened.in_doubt_oldest_age,
            approvals_waiting=opened.approvals_waiting,
            approvals_oldest_age=opened.approvals_oldest_age,
            irreversible_executions=total["irreversible"],
            irreversible_per_run=tally.irreversible_per_run(conn, IRREVERSIBLE_RUNS, since=start),
            runs_by_state=dict(sorted((+_runs_in_states(conn, now, start, runs, failed)).items())),
            webhooks_dead=dead,
        )

    found, waiting = tally.after_folding(ledger.store, counted)
    return replace(found, changes_not_counted=waiting) if waiting else found


def _runs_in_states(
    conn: Conn, now: float, start: float | None, runs: int, failed: int
) -> Counter[str]:
    """``runs`` runs (``failed`` of them with a failed action) with an action first attempted at
    ``start`` or later (all if None), by state. Runs with an open action, waiting on a ticket or
    ended by a control are judged one by one; every other run is done or has failures, as the
    counts say. Waiting runs may be thousands: the database matches them to their tallies in
    one read, and no other run is read."""
    seen = _open_actions(conn)
    endings = {run_id: status for run_id, status, _ in stat_rows.endings(conn)}
    waiting = tally.runs_among(conn, stat_rows.pending_runs(now), since=start)
    others = tally.runs_of(conn, (set(seen) | set(endings)) - set(waiting))
    known = {r: t for r, t in others.items() if tally.active_since(t, start)} | waiting
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
    runs: dict[str, tally.RunTally],
    seen: dict[str, set[str]],
    waiting: set[str],
    endings: dict[str, str],
) -> Counter[str]:
    found: Counter[str] = Counter()
    for run_id, run in runs.items():
        state = run_state(seen.get(run_id, set()), waiting=run_id in waiting, failed=run.failed > 0)
        found[endings.get(run_id) or state] += 1
    return found


# A run's states: from its actions (``run_state``), or the ending a run control recorded.
RUN_STATES = (
    "in_doubt",
    "running",
    "waiting_approval",
    "has_failures",
    "done",
    "escalated",
    "undone",
    "partly_undone",
)


def run_state(open_states: Collection[str], *, waiting: bool, failed: bool) -> str:
    """A run's state from the states of its open actions (started, in doubt), whether a ticket
    waits and whether an action failed: the first that applies in this order (beside the ending
    a run control recorded: escalated, undone, partly_undone). ``stats`` and the console's runs
    say it alike."""
    if "in_doubt" in open_states:
        return "in_doubt"
    if "started" in open_states:
        return "running"
    if waiting:
        return "waiting_approval"
    return "has_failures" if failed else "done"


def render(stats: Stats) -> str:
    """The figures as a few readable lines."""
    window = "all time" if stats.since_seconds is None else f"last {age(stats.since_seconds)}"
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
    if stats.changes_not_counted:
        lines.append(
            f"Not counted yet:          {stats.changes_not_counted} changes since the last fold "
            "(folding them needs a write, refused here; a `stats` where it is allowed counts them)"
        )
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


def _oldest(seconds: float | None) -> str:
    return "" if seconds is None else f", oldest {age(seconds)}"


# -- figures the shipped alerts watch (alerts/call4agents.rules.yml) -----------------------------


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
    """The runs' figures, all time or a window's: counts, and how many runs had each cost (to
    two significant figures) and each count of tool calls, whose quantiles the alerts watch."""

    completed: int
    without_read: int
    costs: dict[float, int]
    calls: dict[float, int]
    triggers: dict[str, int]


def alert_figures(ledger: LedgerCore, stats: Stats, since: float | None = None) -> AlertFigures:
    """The alerts' figures for runs active in the last ``since`` seconds (all time if None).

    Cost per run is what a budget's counters recorded (runs without a budget have no cost);
    its quantiles are given to two significant figures. A run counts once however many times
    it was entered. All time, the figures come from the tallies, kept as run counters change
    (see ``tally``); a window reads the counters of the runs entered in it.
    """
    runs = _every_run(ledger) if since is None else _runs_entered(ledger, since)
    endings_done = _endings_by_status(ledger, since)
    if runs.completed:
        endings_done["completed"] = runs.completed
    opened = open_figures(ledger)
    return AlertFigures(
        irreversible_executions=stats.irreversible_executions,
        dedup_rate=stats.dedup_rate,
        escalations_open=opened.escalations_open,
        escalations_oldest_age=opened.escalations_oldest_age,
        runs_completed=runs.completed,
        runs_completed_without_read=runs.without_read,
        without_read_share=runs.without_read / runs.completed if runs.completed else None,
        cost_per_run_p95=tally.quantile(runs.costs, 0.95),
        cost_per_run_p99=tally.quantile(runs.costs, 0.99),
        tool_calls_per_run_p95=tally.quantile(runs.calls, 0.95),
        runs_by_trigger=dict(sorted(runs.triggers.items())),
        runs_by_ending=dict(sorted(endings_done.items())),
    )


def _every_run(ledger: LedgerCore) -> _RunFigures:
    """Every run's figures from the tallies, after folding (see ``tally``): as many rows as
    there are triggers, tool-call counts and two-figure costs, whatever the number of runs."""
    total, _ = tally.after_folding(ledger.store, lambda conn: tally.totals(conn, None))
    return _RunFigures(
        total[tally.COMPLETED],
        total[tally.COMPLETED] - total[tally.WITH_READ],
        {float(k): n for k, n in tally.named(total, tally.BY_COST).items()},
        {float(k): n for k, n in tally.named(total, tally.BY_CALLS).items()},
        tally.named(total, tally.BY_TRIGGER),
    )


def _runs_entered(ledger: LedgerCore, since: float) -> _RunFigures:
    """From each counter of the runs entered (or budgeted) in the window; cost quantiles to two
    significant figures, as all-time ones are (rounding keeps the order, so this is the
    quantile of the rounded costs)."""
    counters: dict[str, dict[str, float]] = {}
    for run_id, name, value in stat_rows.run_counters_active(ledger.store, since):
        counters.setdefault(run_id, {})[name] = value
    completed = [r for r, v in counters.items() if COMPLETED_AT in v]
    triggers = Counter(
        name[len(TRIGGER) :] for v in counters.values() for name in v if name.startswith(TRIGGER)
    )
    return _RunFigures(
        len(completed),
        sum(not counters[r].get(READS) for r in completed),
        Counter(tally.two_figures(v[tally.COST]) for v in counters.values() if tally.COST in v),
        Counter(v[TOOL_CALLS] for v in counters.values() if TOOL_CALLS in v),
        dict(triggers),
    )


def _endings_by_status(ledger: LedgerCore, since: float | None) -> Counter[str]:
    """Endings recorded by run controls (escalated, a budget limit, undone) in the window."""
    start = None if since is None else ledger.store.now() - since
    with ledger.store.read() as conn:
        return Counter(status for _, status, _ in stat_rows.endings(conn, start))


def render_alerts(figures: AlertFigures) -> str:
    """The alerts' figures as readable lines, under ``render``'s."""
    share = figures.without_read_share
    lines = [
        f"Escalations open:         {figures.escalations_open}"
        f"{_oldest(figures.escalations_oldest_age)}",
        f"Completed without a read: {figures.runs_completed_without_read} of "
        f"{figures.runs_completed} completed runs"
        + ("" if share is None else f" ({share:.1%}; claims without evidence?)"),
        f"Cost per run:             p95 {number(figures.cost_per_run_p95)}, "
        f"p99 {number(figures.cost_per_run_p99)} (runs with a budget)",
        f"Tool calls per run:       p95 {number(figures.tool_calls_per_run_p95)}",
        "Runs by trigger:          "
        + (", ".join(f"{n} {t}" for t, n in figures.runs_by_trigger.items()) or "none given"),
        "Runs by ending:           "
        + (", ".join(f"{n} {t}" for t, n in figures.runs_by_ending.items()) or "none"),
    ]
    return "\n".join(lines)


def number(value: float | None) -> str:
    """A figure such as a cost per run, as ``stats`` and the console's charts say it."""
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

    Every read is bounded by the window, not the ledger: executions, repeats and doubt from
    the tallies' minute or hour rows (see ``tally``), tickets through the pending index's
    ``expires_at`` and each ticket's action by its key, runs completed through the counters'
    value index, and cost from the counters of the runs completed or acting in the window.
    Where this database user may not fold, the tallies are as of the last fold. Open doubt at
    each bucket's end is what is open now less what fell in doubt since, plus what left it
    since. An escalation is open from when it was made until the run was first entered again
    (picked up); one whose ending a later control replaced (an undo) leaves the chart.
    ``ever``: also count the actions executed without a yes over all time, in the pass that
    finds the window's (it then asks every ticket ever opened, not only those open in the
    window).
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

    (count, found), _ = tally.after_folding(ledger.store, read)
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

    charted = ("executions", "irreversible", tally.DEDUPED, tally.DOUBT_IN, tally.DOUBT_OUT)
    moved = {name: [0] * n for name in charted}
    for filed, name, value in tally.between(conn, step, int(start), None):
        if name in moved:
            moved[name][slot(filed)] += value
    executions, deduped = moved["executions"], moved[tally.DEDUPED]
    bad = [0] * n
    for at in unapproved:
        bad[slot(at)] += 1
    ended: list[Counter[str]] = [Counter() for _ in range(n)]
    for _, status, at in stat_rows.endings(conn, start):
        ended[slot(at)][status] += 1
    completions = stat_rows.completions_since(conn, start)
    for i, k in slots([at for at, _ in completions]).items():
        ended[i]["completed"] += k
    # Counted as the alert figures count them (runs by two-figure cost), for tally.quantile.
    costs: list[Counter[float]] = [Counter() for _ in range(n)]
    priced = [(at, cost) for at, cost in completions if cost is not None]
    for at, cost in priced + stat_rows.acting_costs_since(conn, start):
        costs[slot(at)][tally.two_figures(cost)] += 1
    waiting_at = _waiting_at(stat_rows.waiting_groups(conn, start, ends), len(ends))
    escalated = stat_rows.escalations_made(conn)
    # Open doubt at a bucket's end: open now, less what fell in doubt after it, plus what left.
    doubt_open = [stat_rows.count_in_doubt(conn)] * n
    for i in range(n - 2, -1, -1):
        fell, left = moved[tally.DOUBT_IN][i + 1], moved[tally.DOUBT_OUT][i + 1]
        doubt_open[i] = doubt_open[i + 1] - fell + left
    found = []
    for i, end in enumerate(ends):
        waiting, oldest = waiting_at[i]
        open_esc = [made for made, up in escalated if made <= end and (up is None or up > end)]
        tried = executions[i] + deduped[i]
        found.append(
            Bucket(
                start=edges[i],
                end=end,
                executions=executions[i],
                irreversible_executions=moved["irreversible"][i],
                unapproved_executions=bad[i],
                deduped=deduped[i],
                dedup_rate=deduped[i] / tried if tried else None,
                in_doubt_open=doubt_open[i],
                approvals_waiting=waiting,
                approvals_oldest_age=None if oldest is None else end - oldest,
                escalations_open=len(open_esc),
                escalations_oldest_age=end - min(open_esc) if open_esc else None,
                runs_ended=dict(sorted(ended[i].items())),
                cost_per_run_p95=tally.quantile(costs[i], 0.95),
                cost_per_run_p99=tally.quantile(costs[i], 0.99),
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
