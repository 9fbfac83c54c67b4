"""Health figures read from the ledger tables, for ``call4agents stats`` and the OTel gauges.

Reads only, but for one write: all-time figures first fold the changes logged since the last
read into the tallies (see ``_tally``); where that write is refused (a read-only database user,
a read-only file), they are counted from every action instead. Times come from the database's
clock, like everything else in the ledger.

How often deduplication fired comes from ``c4a_dedup_hits``: repeats are counted in memory and
added there every few seconds (see ``_hits``), so the last few seconds may not show yet.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, func, select

from . import _tally
from .errors import LedgerError
from .store import now_sql
from .tables import approvals, dedup_hits, effects, in_open_state, open_states, runs

if TYPE_CHECKING:
    from .ledger import Ledger

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


def open_figures(ledger: Ledger) -> OpenFigures:
    """In-doubt actions and approvals waiting now, with the age of the oldest of each."""
    with ledger.store.read() as conn:
        now = float(conn.execute(select(now_sql(ledger.dialect))).scalar_one())
        doubt, doubt_since = conn.execute(
            select(func.count(), func.min(effects.c.updated_at)).where(in_open_state("in_doubt"))
        ).one()
        waiting, asked = conn.execute(
            select(func.count(), func.min(approvals.c.requested_at)).where(
                approvals.c.state == "pending", approvals.c.expires_at > now
            )
        ).one()
    return OpenFigures(
        int(doubt),
        None if doubt_since is None else max(0.0, now - float(doubt_since)),
        int(waiting),
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


def compute(ledger: Ledger, since: float | None = None) -> Stats:
    """Figures for actions first attempted in the last ``since`` seconds (all time if None).

    Open figures (in doubt, approvals waiting) count everything open, whatever its age. All-time
    figures come from tallies kept as actions change (see ``_tally``), so they cost the same at
    any ledger size; a window reads the actions changed within it.
    """
    ledger.sweep()  # a dead worker's action counts as in doubt, not running
    now = ledger.store.now()
    counts = _all_time(ledger, now) if since is None else _window(ledger, now, since)
    minute = None if since is None else int((now - since) // 60)
    with ledger.store.read() as conn:
        deduped = int(
            conn.execute(
                select(func.coalesce(func.sum(dedup_hits.c.hits), 0)).where(
                    *([] if minute is None else [dedup_hits.c.minute >= minute])
                )
            ).scalar_one()
        )
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


def _waiting_runs(conn: Connection, now: float) -> set[str]:
    return set(
        conn.execute(
            # No DISTINCT: SQLite would walk the run index end to end to keep runs apart.
            select(approvals.c.run_id).where(
                approvals.c.state == "pending", approvals.c.expires_at > now
            )
        ).scalars()
    )


def _endings(conn: Connection) -> dict[str, str]:
    # Only runs ended by a run control (escalated, undone) have a row: a small table.
    return {r.run_id: r.status for r in conn.execute(select(runs.c.run_id, runs.c.status))}


def _all_time(ledger: Ledger, now: float) -> _Counts:
    """From the tallies, after folding in the changes not yet counted. Reads only what is open
    (actions started or in doubt, approvals waiting) and runs ended by a run control."""
    try:
        while True:
            with ledger.store.tx() as conn:
                if _tally.fold_batch(conn) < _tally.BATCH:
                    return _from_tallies(conn, now)
    except LedgerError:
        return _window(ledger, now, None)  # may not write here: count every action


def _from_tallies(conn: Connection, now: float) -> _Counts:
    total = _tally.read(conn)
    by_state = {s: total.get("actions:" + s, 0) for s in _tally.STATES}
    seen: dict[str, set[str]] = {}
    for run_id, state in conn.execute(
        select(effects.c.run_id, effects.c.state).where(open_states())
    ):
        seen.setdefault(run_id, set()).add(state)
    waiting = _waiting_runs(conn, now)
    endings = _endings(conn)
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


def _window(ledger: Ledger, now: float, since: float | None) -> _Counts:
    """From the actions first attempted in the window (every action if None). An action
    created in it was also last changed in it, so the read is bounded by the index on
    ``updated_at``, not the ledger."""
    stmt = select(effects.c.run_id, effects.c.kind, effects.c.state, effects.c.attempt)
    if since is not None:
        start = now - since
        stmt = stmt.where(effects.c.updated_at >= start, effects.c.created_at >= start)
    with ledger.store.read() as conn:
        rows = conn.execute(stmt).all()
        endings = _endings(conn)
        waiting_runs = _waiting_runs(conn, now)
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
