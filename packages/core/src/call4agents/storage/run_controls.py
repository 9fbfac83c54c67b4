"""The statements of the run controls: a run's ending in ``c4a_runs``, and what its budget
counted in ``c4a_run_counters`` (names without the ``run.`` prefix).

Budgets are checked and counted inside the transaction that claims an action, so these take
the caller's connection (``Conn``): two workers cannot both take a run's last call, and a crash
cannot lose a count.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import select, update

from .dialects import dialect_of
from .run_rows import counters_in
from .store import Conn, Store, clock
from .tables import run_counters, runs

STARTED = "started_at"  # when the run's clock started; its row is the run's budget lock


def write_status(
    conn: Conn, dialect: str, run_id: str, status: str, reason: str | None, section: str, data: Any
) -> None:
    """Set the run's ending and one section of its details, keeping the other sections."""
    now = dialect_of(dialect).now()
    insert = dialect_of(dialect).insert
    # Make sure the row exists, then update it under the row lock: two controls at once
    # (an undo while escalating) each keep the other's section.
    conn.execute(
        insert(runs)
        .values(
            run_id=run_id,
            status=status,
            reason=reason,
            details="{}",
            created_at=now,
            updated_at=now,
        )
        .on_conflict_do_nothing(index_elements=["run_id"])
    )
    stmt = dialect_of(dialect).locked(select(runs.c.details).where(runs.c.run_id == run_id))
    details = json.loads(conn.execute(stmt).scalar_one() or "{}")
    # Each section says when it was written (database clock): an escalation keeps its own moment
    # when an undo later changes the row, so a watcher tells one escalation from the next.
    details[section] = {**data, "at": clock(conn)} if isinstance(data, dict) else data
    conn.execute(
        update(runs)
        .where(runs.c.run_id == run_id)
        .values(
            status=status,
            reason=reason,
            details=json.dumps(details, default=str),
            updated_at=now,
        )
    )


def status(store: Store, run_id: str) -> dict[str, Any] | None:
    with store.read() as conn:
        row = conn.execute(select(runs).where(runs.c.run_id == run_id)).mappings().first()
    return None if row is None else dict(row)


def statuses(store: Store, status: str | None, limit: int) -> list[dict[str, Any]]:
    """Runs a control ended, latest first; only those of ``status`` if given."""
    stmt = select(runs).order_by(runs.c.updated_at.desc()).limit(limit)
    if status is not None:
        stmt = stmt.where(runs.c.status == status)
    with store.read() as conn:
        return [dict(row) for row in conn.execute(stmt).mappings()]


def counted(store: Store, run_ids: list[str]) -> tuple[dict[str, dict[str, float]], float]:
    """Each run's counters, and the database clock, in one read."""
    with store.read() as conn:
        values = {run_id: counters_in(conn, run_id) for run_id in run_ids}
        return values, clock(conn)


def start(conn: Conn, dialect: str, run_id: str) -> None:
    """Start the run's clock, unless it started before (a resume keeps the first start)."""
    insert = dialect_of(dialect).insert
    conn.execute(
        insert(run_counters)
        .values(run_id=run_id, name=STARTED, value=dialect_of(dialect).now())
        .on_conflict_do_nothing(index_elements=["run_id", "name"])
    )


def locked(conn: Conn, dialect: str, run_id: str) -> tuple[dict[str, float], float]:
    """The run's counters under its lock, and the seconds since its clock started."""
    # Entering the run started the clock; this only covers a run entered before any ledger was
    # open, and makes sure the lock row below exists.
    start(conn, dialect, run_id)
    if dialect_of(dialect).row_locks:
        # The started_at row is the run's lock: every counting step takes it first. Locking the
        # whole row set instead is not enough: a statement that waited on a lock still sees the
        # rows as they were when it began, so a counter row the previous holder created would
        # be missed and two workers could both take the last call. The read below is a new
        # statement, so it sees everything the previous holder committed.
        conn.execute(
            select(run_counters.c.value)
            .where(run_counters.c.run_id == run_id, run_counters.c.name == STARTED)
            .with_for_update()
        )
    values = counters_in(conn, run_id)
    return values, clock(conn) - values[STARTED]


def add(conn: Conn, dialect: str, run_id: str, amounts: Mapping[str, float]) -> None:
    """Add to the run's counters (each created at 0 when first counted)."""
    insert = dialect_of(dialect).insert
    for name, amount in amounts.items():
        conn.execute(
            insert(run_counters)
            .values(run_id=run_id, name=name, value=0.0)
            .on_conflict_do_nothing(index_elements=["run_id", "name"])
        )
        conn.execute(
            update(run_counters)
            .where(run_counters.c.run_id == run_id, run_counters.c.name == name)
            .values(value=run_counters.c.value + amount)
        )


def statuses_of(store: Store, run_ids: Sequence[str]) -> dict[str, str]:
    """The ending of each of these runs that has one, in one read."""
    if not run_ids:
        return {}
    stmt = select(runs.c.run_id, runs.c.status).where(runs.c.run_id.in_(list(run_ids)))
    with store.read() as conn:
        return {str(run_id): str(status) for run_id, status in conn.execute(stmt).all()}
