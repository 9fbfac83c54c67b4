"""The statements behind ``call4agents stats``, the alerts' figures and the console's health.

Every read here is bounded by an index: what is open (the partial index of open actions, the
pending tickets), a window (``updated_at``, a ticket's ``expires_at``, the dedup minute), or a
key; all-time figures come from the tallies (``_tally``). ``tests/core/test_query_plans.py``
holds each one to its plan on both databases. Rows are returned as plain tuples, by position.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

from sqlalchemy import ColumnElement, Select, func, or_, select

from . import _tally
from .run_rows import COMPLETED_AT, ENTERED_AT
from .store import Conn, Store, clock
from .tables import approvals, dedup_hits, effects, in_open_state, open_states, run_counters, runs

T = TypeVar("T")
TICKET_STATES = ("pending", "approved", "denied", "spent")
_CHUNK = 500  # keys per IN (...): under SQLite's limit of bound parameters


def open_now(store: Store) -> tuple[float, int, float | None, int, float | None]:
    """The clock; actions in doubt and since when the oldest is; tickets waiting and the oldest
    one's asking time."""
    with store.read() as conn:
        now = clock(conn)
        doubt, doubt_since = conn.execute(
            select(func.count(), func.min(effects.c.updated_at)).where(in_open_state("in_doubt"))
        ).one()
        waiting, asked = conn.execute(
            select(func.count(), func.min(approvals.c.requested_at)).where(
                approvals.c.state == "pending", approvals.c.expires_at > now
            )
        ).one()
    return now, int(doubt), doubt_since, int(waiting), asked


def deduped(store: Store, minute: int | None) -> int:
    """Repeats served from the record, since ``minute`` (all time if None)."""
    with store.read() as conn:
        found = conn.execute(
            select(func.coalesce(func.sum(dedup_hits.c.hits), 0)).where(
                *([] if minute is None else [dedup_hits.c.minute >= minute])
            )
        ).scalar_one()
    return int(found)


def waiting_runs(conn: Conn, now: float) -> set[str]:
    return set(
        conn.execute(
            # No DISTINCT: SQLite would walk the run index end to end to keep runs apart.
            select(approvals.c.run_id).where(
                approvals.c.state == "pending", approvals.c.expires_at > now
            )
        ).scalars()
    )


def endings(conn: Conn) -> dict[str, str]:
    # Only runs ended by a run control (escalated, undone) have a row: a small table.
    return {r.run_id: r.status for r in conn.execute(select(runs.c.run_id, runs.c.status))}


def open_actions(conn: Conn) -> list[tuple[str, str]]:
    """(run id, state) of every action started or in doubt."""
    found = conn.execute(select(effects.c.run_id, effects.c.state).where(open_states()))
    return [(str(run_id), str(state)) for run_id, state in found]


def after_folding(store: Store, read: Callable[[Conn], T]) -> T:
    """``read`` in the transaction that folded the last changes into the tallies (a batch at a
    time, each batch its own transaction). A LedgerError if this user may not write."""
    while True:
        with store.tx() as conn:
            if _tally.fold_batch(conn) < _tally.BATCH:
                return read(conn)


def window(
    store: Store, now: float, since: float | None
) -> tuple[list[Any], dict[str, str], set[str]]:
    """The actions first attempted in the window (every action if None): run id, kind, state,
    attempt; with the runs' control endings and the runs waiting on a ticket. An action created
    in the window was also last changed in it, so the read is bounded by ``updated_at``."""
    stmt = select(effects.c.run_id, effects.c.kind, effects.c.state, effects.c.attempt)
    if since is not None:
        start = now - since
        stmt = stmt.where(effects.c.updated_at >= start, effects.c.created_at >= start)
    with store.read() as conn:
        return list(conn.execute(stmt).all()), endings(conn), waiting_runs(conn, now)


def _not_picked_up() -> tuple[ColumnElement[bool], ...]:
    """Escalated runs nobody has picked up yet: picked up means the run was entered again after
    it was escalated, or a later control changed its ending."""
    entered = (
        select(run_counters.c.value)
        .where(run_counters.c.run_id == runs.c.run_id, run_counters.c.name == ENTERED_AT)
        .scalar_subquery()
    )
    return runs.c.status == "escalated", or_(entered.is_(None), entered < runs.c.updated_at)


def open_escalations(store: Store) -> tuple[float, int, float | None]:
    """The clock, the escalations nobody picked up, and when the oldest was made."""
    with store.read() as conn:
        now = clock(conn)
        count, oldest = conn.execute(
            select(func.count(), func.min(runs.c.updated_at)).where(*_not_picked_up())
        ).one()
    return now, int(count), oldest


def escalations_made(conn: Conn) -> list[float]:
    """When each escalation nobody has picked up yet was made."""
    stmt = select(runs.c.updated_at).where(*_not_picked_up())
    return [float(at) for at in conn.execute(stmt).scalars()]


def run_counters_active(store: Store, since: float | None) -> list[tuple[str, str, float]]:
    """Every counter of the runs entered (or budgeted) in the window (all runs if None)."""
    with store.read() as conn:
        now = clock(conn)
        active = select(run_counters.c.run_id).where(
            run_counters.c.name.in_((ENTERED_AT, "started_at")),
            *([] if since is None else [run_counters.c.value >= now - since]),
        )
        rows = conn.execute(
            select(run_counters.c.run_id, run_counters.c.name, run_counters.c.value).where(
                run_counters.c.run_id.in_(active)
            )
        )
        return [(str(r), str(n), float(v)) for r, n, v in rows]


def endings_by_status(store: Store, since: float | None) -> list[tuple[str, int]]:
    """Endings recorded by run controls in the window, counted by status."""
    with store.read() as conn:
        now = clock(conn)
        rows = conn.execute(
            select(runs.c.status, func.count())
            .where(*([] if since is None else [runs.c.updated_at >= now - since]))
            .group_by(runs.c.status)
        )
        return [(str(status), int(n)) for status, n in rows]


def endings_since(conn: Conn, start: float) -> list[tuple[str, float]]:
    rows = conn.execute(select(runs.c.status, runs.c.updated_at).where(runs.c.updated_at >= start))
    return [(str(status), float(at)) for status, at in rows]


def _actions_columns() -> Select[Any]:
    return select(
        effects.c.key,
        effects.c.run_id,
        effects.c.kind,
        effects.c.attempt,
        effects.c.created_at,
        effects.c.updated_at,
    )


def actions_since(conn: Conn, start: float) -> list[Any]:
    """The actions first attempted since ``start``, through the index on ``updated_at``: key,
    run id, kind, attempt, created, updated."""
    stmt = _actions_columns().where(effects.c.updated_at >= start, effects.c.created_at >= start)
    return list(conn.execute(stmt).all())


def actions_by_keys(conn: Conn, keys: Sequence[str]) -> list[Any]:
    """The same columns, for actions by their unique keys."""
    found: list[Any] = []
    for i in range(0, len(keys), _CHUNK):
        found += conn.execute(_actions_columns().where(effects.c.key.in_(keys[i : i + _CHUNK])))
    return found


def tickets_since(conn: Conn, start: float | None) -> list[Any]:
    """Every ticket open at some time since ``start`` (all if None): key, attempt, state, asked,
    expires, decided; through the pending index's ``expires_at``."""
    return list(
        conn.execute(
            select(
                approvals.c.key,
                approvals.c.for_attempt,
                approvals.c.state,
                approvals.c.requested_at,
                approvals.c.expires_at,
                approvals.c.decided_at,
            ).where(
                approvals.c.state.in_(TICKET_STATES),
                *([] if start is None else [approvals.c.expires_at > start]),
            )
        ).all()
    )


def in_doubt_since(conn: Conn) -> list[float]:
    """When each action now in doubt was last changed (fell in doubt)."""
    stmt = select(effects.c.updated_at).where(in_open_state("in_doubt"))
    return [float(at) for at in conn.execute(stmt).scalars()]


def hits_by_minute(conn: Conn, minute: int) -> list[tuple[int, int]]:
    rows = conn.execute(
        select(dedup_hits.c.minute, func.sum(dedup_hits.c.hits))
        .where(dedup_hits.c.minute >= minute)
        .group_by(dedup_hits.c.minute)
    )
    return [(int(m), int(n)) for m, n in rows]


def cost_and_completion(conn: Conn, run_ids: Iterable[str]) -> dict[str, dict[str, float]]:
    """The cost and completion counters of these runs, by primary key, a chunk at a time."""
    wanted = list(run_ids)
    found: dict[str, dict[str, float]] = {}
    for i in range(0, len(wanted), _CHUNK):
        rows = conn.execute(
            select(run_counters.c.run_id, run_counters.c.name, run_counters.c.value).where(
                run_counters.c.run_id.in_(wanted[i : i + _CHUNK]),
                run_counters.c.name.in_((COMPLETED_AT, "cost")),
            )
        )
        for run_id, name, value in rows:
            found.setdefault(run_id, {})[name] = float(value)
    return found
