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
from bisect import bisect_left
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from call4agents.model.errors import LedgerError
from call4agents.storage import _tally, stat_rows
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


def compute(ledger: LedgerCore, since: float | None = None) -> Stats:
    """Figures for actions first attempted in the last ``since`` seconds (all time if None).

    Open figures (in doubt, approvals waiting) count everything open, whatever its age. All-time
    figures come from tallies kept as actions change (see ``_tally``), so they cost the same at
    any ledger size; a window reads the actions changed within it.
    """
    ledger.sweep()  # a dead worker's action counts as in doubt, not running
    now = ledger.store.now()
    counts = _all_time(ledger, now) if since is None else _window(ledger, now, since)
    minute = None if since is None else int((now - since) // 60)
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
    )


def _all_time(ledger: LedgerCore, now: float) -> _Counts:
    """From the tallies, after folding in the changes not yet counted. Reads only what is open
    (actions started or in doubt, approvals waiting) and runs ended by a run control."""
    try:
        return stat_rows.after_folding(ledger.store, lambda conn: _from_tallies(conn, now))
    except LedgerError:
        return _window(ledger, now, None)  # may not write here: count every action


def _from_tallies(conn: Conn, now: float) -> _Counts:
    total = _tally.read(conn)
    by_state = {s: total.get("actions:" + s, 0) for s in _tally.STATES}
    seen: dict[str, set[str]] = {}
    for run_id, state in stat_rows.open_actions(conn):
        seen.setdefault(run_id, set()).add(state)
    waiting = stat_rows.waiting_runs(conn, now)
    endings = stat_rows.endings(conn)
    # Runs open, waiting or ended are judged one by one; every other run is done or has
    # failures, which the tallies count.
    known = _tally.runs_of(conn, set(seen) | waiting | set(endings))
    found: Counter[str] = Counter()
    for run_id, run in known.items():
        states = seen.get(run_id, set()) | ({"failed"} if run.failed else set())
        found[endings.get(run_id) or _run_state(states, run_id in waiting)] += 1
    failed_rest = total.get("runs_failed", 0) - sum(run.failed > 0 for run in known.values())
    found["has_failures"] += failed_rest
    found["done"] += total.get("runs", 0) - len(known) - failed_rest
    return _Counts(
        by_state={s: n for s, n in by_state.items() if n},
        retried=total.get("retried", 0),
        executions=total.get("executions", 0),
        irreversible=total.get("irreversible", 0),
        irreversible_per_run=_tally.irreversible_per_run(conn, IRREVERSIBLE_RUNS),
        runs_by_state={s: n for s, n in sorted(found.items()) if n},
    )


def _window(ledger: LedgerCore, now: float, since: float | None) -> _Counts:
    """From the actions first attempted in the window (every action if None). An action
    created in it was also last changed in it, so the read is bounded by the index on
    ``updated_at``, not the ledger."""
    rows, endings, waiting_runs = stat_rows.window(ledger.store, now, since)
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


def alert_figures(ledger: LedgerCore, stats: Stats, since: float | None = None) -> AlertFigures:
    """The alerts' figures for runs active in the last ``since`` seconds (all time if None).

    Cost per run is what a budget's counters recorded (runs without a budget have no cost);
    a run counts once however many times it was entered.
    """
    counters = _run_counter_rows(ledger, since)
    completed = [r for r, v in counters.items() if COMPLETED_AT in v]
    without = [r for r in completed if not counters[r].get(READS)]
    costs = sorted(v["cost"] for v in counters.values() if "cost" in v)
    calls = sorted(v[TOOL_CALLS] for v in counters.values() if TOOL_CALLS in v)
    triggers: Counter[str] = Counter(
        name[len(TRIGGER) :] for v in counters.values() for name in v if name.startswith(TRIGGER)
    )
    endings_done = _endings_by_status(ledger, since)
    if completed:
        endings_done["completed"] = len(completed)
    escalations, oldest = open_escalations(ledger)
    return AlertFigures(
        irreversible_executions=stats.irreversible_executions,
        dedup_rate=stats.dedup_rate,
        escalations_open=escalations,
        escalations_oldest_age=oldest,
        runs_completed=len(completed),
        runs_completed_without_read=len(without),
        without_read_share=len(without) / len(completed) if completed else None,
        cost_per_run_p95=_quantile(costs, 0.95),
        cost_per_run_p99=_quantile(costs, 0.99),
        tool_calls_per_run_p95=_quantile(calls, 0.95),
        runs_by_trigger=dict(sorted(triggers.items())),
        runs_by_ending=dict(sorted(endings_done.items())),
    )


def _run_counter_rows(ledger: LedgerCore, since: float | None) -> dict[str, dict[str, float]]:
    """Each run's counters, for runs entered (or budgeted) in the window."""
    found: dict[str, dict[str, float]] = {}
    for run_id, name, value in stat_rows.run_counters_active(ledger.store, since):
        found.setdefault(run_id, {})[name] = value
    return found


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

# What counts as a yes for an attempt: a ticket approved for it (spent once the attempt started).
_YES_STATES = ("approved", "spent")


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

    @property
    def unapproved_executions(self) -> int:
        return sum(b.unapproved_executions for b in self.buckets)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def series(ledger: LedgerCore, since: float, buckets: int = 24) -> Series:
    """The health figures of the last ``since`` seconds in ``buckets`` equal stretches.

    Every read is bounded by the window, not the ledger: actions through the index on
    ``updated_at`` (an action first attempted in the window was last changed in it), tickets
    through the pending index's ``expires_at``, repeats through the minute index, and cost from
    the counters of the runs whose actions were read. What the ledger keeps no history of is
    drawn from what is open now: an in-doubt action counts from when it fell in doubt until it
    is settled, and a settled one leaves the chart (the ledger keeps no record of when it fell
    in doubt); likewise an escalation picked up since.
    """
    if since <= 0 or buckets < 1:
        raise ValueError("series needs a window over 0 seconds and at least one bucket")
    ledger.sweep()  # a dead worker's action counts as in doubt, not running
    now = ledger.store.now()
    start, width = now - since, since / buckets
    edges = [start + i * width for i in range(buckets + 1)]

    def slot(at: float) -> int:
        return min(buckets - 1, max(0, int((at - start) // width)))

    with ledger.store.read() as conn:
        actions = stat_rows.actions_since(conn, start)
        tickets = stat_rows.tickets_since(conn, start)
        unapproved = _without_a_yes(actions, tickets)
        doubt_since = stat_rows.in_doubt_since(conn)
        hits = stat_rows.hits_by_minute(conn, int(start // 60))
        escalated = stat_rows.escalations_made(conn)
        endings = stat_rows.endings_since(conn, start)
        last_seen: dict[str, float] = {}
        for _key, run_id, _kind, _attempt, _created, updated in actions:
            last_seen[run_id] = max(last_seen.get(run_id, 0.0), float(updated))
        counters = stat_rows.cost_and_completion(conn, last_seen)

    executions, irreversible, bad, deduped = ([0] * buckets for _ in range(4))
    for _key, _run, kind, attempt, created, _updated in actions:
        executions[slot(created)] += attempt
        if kind == "irreversible":
            irreversible[slot(created)] += attempt
    for at in unapproved:
        bad[slot(at)] += 1
    for minute, n in hits:
        deduped[slot(float(minute) * 60)] += int(n)
    ended: list[Counter[str]] = [Counter() for _ in range(buckets)]
    for status, at in endings:
        ended[slot(at)][str(status)] += 1
    costs: list[list[float]] = [[] for _ in range(buckets)]
    for run_id, values in counters.items():
        done = values.get(COMPLETED_AT)
        if done is not None and done >= start:
            ended[slot(done)]["completed"] += 1
        if "cost" in values:
            costs[slot(done if done is not None else last_seen[run_id])].append(values["cost"])
    waiting_at = _waiting_at(tickets, edges[1:])
    found = []
    for i in range(buckets):
        end = edges[i + 1]
        waiting, oldest = waiting_at[i]
        open_esc = [at for at in escalated if at <= end]
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
                in_doubt_open=sum(at <= end for at in doubt_since),
                approvals_waiting=waiting,
                approvals_oldest_age=None if oldest is None else end - oldest,
                escalations_open=len(open_esc),
                escalations_oldest_age=end - min(open_esc) if open_esc else None,
                runs_ended=dict(sorted(ended[i].items())),
                cost_per_run_p95=_quantile(spent, 0.95),
                cost_per_run_p99=_quantile(spent, 0.99),
            )
        )
    return Series(since_seconds=since, bucket_seconds=width, buckets=found)


def unapproved_executions(ledger: LedgerCore, since: float | None = None) -> int:
    """Actions that needed a person's yes and started without one, first attempted in the last
    ``since`` seconds (all time if None). Must stay 0.

    Needed a yes: a ticket was opened for the action. Without one: its latest attempt started
    with no ticket approved for that attempt (an approved ticket is spent as the attempt starts).
    The ledger cannot see a tool that needed a yes and never asked; the
    ``call4agents.unapproved.executions`` metric, counted where the tool runs, sees that too.
    """
    start = None if since is None else ledger.store.now() - since
    with ledger.store.read() as conn:
        if start is None:
            return len(_unapproved(conn))
        actions = stat_rows.actions_since(conn, start)
        return len(_without_a_yes(actions, stat_rows.tickets_since(conn, start)))


def _or_inf(value: float | None) -> float:
    return math.inf if value is None else float(value)


def _waiting_at(tickets: Sequence[Any], ends: list[float]) -> list[tuple[int, float | None]]:
    """How many tickets waited at each of ``ends`` (sorted), and since when the oldest did.

    A ticket waited from when it was asked until it was decided or expired. Counted with a
    difference array over the ends, so ten thousand tickets cost the same at 12 buckets or 28;
    the oldest is the first ticket, in the order asked, still waiting at that end."""
    spans = sorted(
        (float(asked), min(float(ends_at), _or_inf(decided)))
        for *_, asked, ends_at, decided in tickets
    )
    delta = [0] * (len(ends) + 1)
    for asked, until in spans:
        # Waiting at an end e when asked <= e < until.
        first, after = bisect_left(ends, asked), bisect_left(ends, until)
        if first < after:
            delta[first] += 1
            delta[after] -= 1
    found: list[tuple[int, float | None]] = []
    count = 0
    for i, end in enumerate(ends):
        count += delta[i]
        oldest = None
        if count:
            for asked, until in spans:
                if asked > end:
                    break
                if until > end:
                    oldest = asked
                    break
        found.append((count, oldest))
    return found


def _without_a_yes(actions: Sequence[Any], tickets: Sequence[Any]) -> list[float]:
    """When each of the window's actions that a ticket asked about, and whose latest attempt
    started with no ticket approved for it, was first attempted. A yes that started an attempt
    in the window was live in it, so the window's tickets hold every yes that matters; a ticket
    that asked, expired before the window, and whose action then ran without a yes in it is
    missed by a window (all time counts it)."""
    # Plain tuples, by position: attribute access on a row costs more, ten thousand times over.
    asked = {key for key, *_ in tickets}
    yes = {(key, attempt) for key, attempt, state, *_ in tickets if state in _YES_STATES}
    return [
        float(at)
        for key, _run, _kind, attempt, at, _updated in actions
        if attempt > 0 and key in asked and (key, attempt) not in yes
    ]


def _unapproved(conn: Conn) -> list[float]:
    """All time: from every ticket ever opened (far fewer than actions), each one's action
    looked up by its unique key."""
    tickets = stat_rows.tickets_since(conn, None)
    keys = sorted({key for key, *_ in tickets})
    return _without_a_yes(stat_rows.actions_by_keys(conn, keys), tickets)
