"""The statements behind ``call4agents stats``, the alerts' figures and the console's health
that read the ledger's own rows rather than the tallies (``tally``).

Every read here is bounded by an index: what is open (the partial index of open actions, the
pending tickets), a window (a run's latest action, a ticket's ``expires_at``, a counter's
value), or a key. ``tests/core/test_query_plans.py`` holds each one to its plan on both
databases. Rows are returned as plain tuples, by position.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import ARRAY, ColumnElement, Float, Select, case, func, literal, or_, select

from .run_rows import COMPLETED_AT, ENTERED_AT, PICKED_UP_AT
from .store import Conn, Store, clock
from .tables import (
    approvals,
    effects,
    in_open_state,
    open_states,
    run_counters,
    run_tallies,
    runs,
)

TICKET_STATES = ("pending", "approved", "denied", "spent")
# What counts as a yes for an attempt: a ticket approved for it (spent once the attempt started).
YES_STATES = ("approved", "spent")


def open_now(store: Store) -> tuple[float, tuple[int, Any], tuple[int, Any], tuple[int, Any]]:
    """The clock, and what is open now, each counted with the time of its oldest: actions in
    doubt (since when), tickets waiting (when asked), escalations nobody picked up (when made)."""
    with store.read() as conn:
        now = clock(conn)
        found = [
            conn.execute(select(func.count(), func.min(at)).where(*where)).one()
            for at, where in (
                (effects.c.updated_at, [in_open_state("in_doubt")]),
                (
                    approvals.c.requested_at,
                    [approvals.c.state == "pending", approvals.c.expires_at > now],
                ),
                (runs.c.updated_at, _not_picked_up()),
            )
        ]
    doubt, waiting, escalated = ((int(n), oldest) for n, oldest in found)
    return now, doubt, waiting, escalated


def pending_runs(now: float) -> Select[Any]:
    """The runs of the tickets waiting at ``now``, a run once per ticket: a statement to match
    against (``tally.runs_among``) or to read."""
    # No DISTINCT: SQLite would walk the run index end to end to keep runs apart.
    return select(approvals.c.run_id).where(
        approvals.c.state == "pending", approvals.c.expires_at > now
    )


def endings(conn: Conn, start: float | None = None) -> list[tuple[str, str, float]]:
    """(run id, status, when) of each ending a run control recorded (escalated, a budget limit,
    undone), since ``start`` (all if None). Only runs ended so have a row: a small table."""
    stmt = select(runs.c.run_id, runs.c.status, runs.c.updated_at)
    found = conn.execute(stmt.where(*([] if start is None else [runs.c.updated_at >= start])))
    return [(str(run_id), str(status), float(at)) for run_id, status, at in found]


def open_actions(conn: Conn) -> list[tuple[str, str]]:
    """(run id, state) of every action started or in doubt."""
    found = conn.execute(select(effects.c.run_id, effects.c.state).where(open_states()))
    return [(str(run_id), str(state)) for run_id, state in found]


def _not_picked_up() -> tuple[ColumnElement[bool], ...]:
    """Escalated runs nobody has picked up yet: picked up means the run was entered again after
    it was escalated, or a later control changed its ending."""
    entered = _counter_of(ENTERED_AT)
    # An entry that began when the run escalated is the one that escalated it (see add_entry).
    return runs.c.status == "escalated", or_(entered.is_(None), entered <= runs.c.updated_at)


def escalations_made(conn: Conn) -> list[tuple[float, float | None]]:
    """When each run whose ending is an escalation was escalated, and when it was picked up
    (None while nobody has): the first entry that began after it, or, for an entry recorded
    before that was kept, the latest entry if it began after."""
    picked = _counter_of(PICKED_UP_AT)
    entered = _counter_of(ENTERED_AT)
    stmt = select(runs.c.updated_at, picked, entered).where(runs.c.status == "escalated")
    found: list[tuple[float, float | None]] = []
    for made, first, latest in conn.execute(stmt):
        up = next((at for at in (first, latest) if at is not None and at > made), None)
        found.append((float(made), None if up is None else float(up)))
    return found


def _counter_of(name: str) -> Any:
    """A run's counter ``name`` beside its ending row (NULL if it has none)."""
    return (
        select(run_counters.c.value)
        .where(run_counters.c.run_id == runs.c.run_id, run_counters.c.name == name)
        .scalar_subquery()
    )


def run_counters_active(store: Store, since: float) -> list[tuple[str, str, float]]:
    """Every counter of the runs entered (or budgeted) in the last ``since`` seconds."""
    with store.read() as conn:
        now = clock(conn)
        active = select(run_counters.c.run_id).where(
            run_counters.c.name.in_((ENTERED_AT, "started_at")),
            run_counters.c.value >= now - since,
        )
        rows = conn.execute(
            select(run_counters.c.run_id, run_counters.c.name, run_counters.c.value).where(
                run_counters.c.run_id.in_(active)
            )
        )
        return [(str(r), str(n), float(v)) for r, n, v in rows]


def waiting_groups(
    conn: Conn, start: float, ends: Sequence[float]
) -> list[tuple[int, int, int, float]]:
    """The tickets open at some time since ``start``, grouped by where they fall among ``ends``
    (sorted): how many ends come before each was asked, and before it stopped waiting (decided,
    or expired); with how many tickets share both, and the earliest asked among them. A ticket
    waited at each end from the first of those counts up to the one before the second.
    Through the pending index's ``expires_at``; the database groups them, so ten thousand
    waiting tickets come back as a few dozen rows."""
    until = case(
        (approvals.c.decided_at < approvals.c.expires_at, approvals.c.decided_at),
        else_=approvals.c.expires_at,
    )
    count = _width_bucket_before if conn.dialect.name == "postgresql" else _ends_before
    first, after = count(approvals.c.requested_at, ends), count(until, ends)
    grouped = (
        select(first, after, func.count(), func.min(approvals.c.requested_at))
        .where(*_tickets_open(start))
        .group_by(first, after)
    )
    return [(int(a), int(b), int(n), float(t)) for a, b, n, t in conn.execute(grouped)]


def _ends_before(value: Any, ends: Sequence[float], lo: int = 0, hi: int | None = None) -> Any:
    """How many of ``ends`` (sorted) are below ``value``, in SQL, known to be between ``lo``
    and ``hi``: Python's ``bisect_left`` written out as nested CASEs, a handful of comparisons
    a row. No arithmetic on the times, so a ticket asked exactly at an end counts as
    ``bisect_left`` counts it."""
    hi = len(ends) if hi is None else hi
    if lo == hi:
        return literal(lo)
    mid = (lo + hi) // 2
    return case(
        (value <= literal(ends[mid], Float), _ends_before(value, ends, lo, mid)),
        else_=_ends_before(value, ends, mid + 1, hi),
    )


def _width_bucket_before(value: Any, ends: Sequence[float]) -> Any:
    """``_ends_before`` on PostgreSQL, in one call (faster there than the CASEs): ``width_bucket``
    counts the thresholds at or below its operand, so it is given the ends negated and counts
    those at or above the value; the rest are below."""
    negated = literal(sorted(-end for end in ends), ARRAY(Float))
    return len(ends) - func.width_bucket(-value, negated)


def _tickets_open(start: float | None, table: Any = approvals) -> list[ColumnElement[bool]]:
    return [
        table.c.state.in_(TICKET_STATES),
        *([] if start is None else [table.c.expires_at > start]),
    ]


def _without_yes(asked: Any, start: float | None, *, attempted_since: bool) -> Any:
    """When the action ticket ``asked`` asked about was first attempted, if its latest attempt
    started with no ticket open since ``start`` (any, if None) approved for that attempt, and
    (``attempted_since``) it was first attempted since ``start``; NULL otherwise. The action is
    looked up by its unique key and a yes by the tickets' key index."""
    yes = approvals.alias("yes")
    approved = (
        select(yes.c.ticket)
        .where(
            yes.c.key == effects.c.key,
            yes.c.for_attempt == effects.c.attempt,
            yes.c.state.in_(YES_STATES),
            *_tickets_open(start, yes),
        )
        .exists()
    )
    since = [] if start is None or not attempted_since else [effects.c.created_at >= start]
    return (
        select(effects.c.created_at)
        .where(effects.c.key == asked.c.key, effects.c.attempt > 0, ~approved, *since)
        .scalar_subquery()
    )


def _one_per_action(found: Iterable[tuple[str, Any]]) -> list[float]:
    """The first attempts of the actions found: a call asked about twice (a second ticket after
    a no) is one action."""
    return [float(at) for at in {key: at for key, at in found if at is not None}.values()]


def unapproved_since(conn: Conn, start: float | None) -> list[float]:
    """When each action a ticket asked about, and whose latest attempt started with no ticket
    approved for that attempt, was first attempted: the tickets open since ``start`` and their
    actions first attempted since then (all if None). A lookup per ticket (far fewer than
    actions), which a join would let the planner trade for a read of every action."""
    asked = approvals.alias("asked")
    action = _without_yes(asked, start, attempted_since=True)
    # Filtered in the statement, so only the few actions found come back, not every ticket.
    rows = conn.execute(
        select(asked.c.key, action).where(*_tickets_open(start, asked), action.is_not(None))
    ).all()
    return _one_per_action((key, at) for key, at in rows)


def unapproved_ever_and_since(conn: Conn, start: float) -> tuple[int, list[float]]:
    """How many actions ``unapproved_since(conn, None)`` finds, and what
    ``unapproved_since(conn, start)`` returns, in one pass over every ticket (the console's
    all-time health page wants both). An action with no yes at all has none open since
    ``start`` either, so the window's check finds every action the all-time one does: it is
    asked of every ticket, and the all-time one only of what it finds."""
    asked = approvals.alias("asked")
    action = _without_yes(asked, start, attempted_since=False)
    ever = _without_yes(asked, None, attempted_since=False)
    rows = conn.execute(
        select(asked.c.key, asked.c.expires_at, action, ever).where(
            *_tickets_open(None, asked), action.is_not(None)
        )
    ).all()
    in_window = [(key, at) for key, until, at, _ in rows if until > start and at >= start]
    return len(_one_per_action((key, at) for key, _, _, at in rows)), _one_per_action(in_window)


def count_in_doubt(conn: Conn) -> int:
    """Actions in doubt now, through the partial index of open actions."""
    return int(conn.execute(select(func.count()).where(in_open_state("in_doubt"))).scalar_one())


def completions_since(conn: Conn, start: float) -> list[tuple[float, float | None]]:
    """When each run that completed since ``start`` completed, with its cost (None if it has
    none): a range of the counters' value index, each run's cost a key."""
    cost = run_counters.alias("cost")
    done = run_counters.alias("done")
    rows = conn.execute(
        select(done.c.value, cost.c.value)
        .outerjoin(cost, (cost.c.run_id == done.c.run_id) & (cost.c.name == "cost"))
        .where(done.c.name == COMPLETED_AT, done.c.value >= start)
    ).all()  # fetched at once: thousands of runs complete in a week
    return [(float(at), None if n is None else float(n)) for at, n in rows]


def acting_costs_since(conn: Conn, start: float) -> list[tuple[float, float]]:
    """(when, cost) of each run with a cost that had an action first attempted since ``start``
    and has not completed since then (when: its latest action): a range of the run tallies'
    ``last_at`` index, each run's cost a key."""
    cost = run_counters.alias("cost")
    done = run_counters.alias("done")
    rows = conn.execute(
        select(run_tallies.c.last_at, cost.c.value)
        .join(cost, (cost.c.run_id == run_tallies.c.run_id) & (cost.c.name == "cost"))
        .outerjoin(done, (done.c.run_id == run_tallies.c.run_id) & (done.c.name == COMPLETED_AT))
        .where(run_tallies.c.last_at >= start, or_(done.c.value.is_(None), done.c.value < start))
    ).all()
    return [(float(at), float(n)) for at, n in rows]
