"""A run's own record: one row per counter in ``c4a_run_counters`` under the names below.

Each entry of a run (``engine.run_notes``) reads the run's history once as it begins (one
statement: was it here before, when, what escalation it may pick up, its totals so far) and
writes its counters once as its outermost block leaves: one multi-row upsert, on PostgreSQL its
own transaction, that adds the summed counters in the database, so workers ending entries of
the same run at once lose none. Read by ``call4agents show``, ``stats`` and the alerts. A
budget keeps its counters in the same table under names without the ``run.`` prefix.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    Connection,
    Float,
    Select,
    Text,
    bindparam,
    case,
    delete,
    exists,
    func,
    or_,
    select,
)

from .dialects import dialect_of
from .store import Store
from .tables import effects, fixed, run_counters, runs

PREFIX = "run."
TRIGGER = "run.trigger:"  # one row per trigger seen, valued the database time it was first seen
ENTERED_AT = "run.entered_at"  # when the latest entry began: a later one picks up an escalation
WALL_CLOCK_MS = "run.wall_clock_ms"  # time spent inside the run, summed over its entries
TOOL_CALLS = "run.tool_calls"
READS = "run.reads"
COMPLETED_AT = "run.completed_at"
# When the run was first entered after its latest escalation: the escalation was picked up.
PICKED_UP_AT = "run.picked_up_at"
COST = "cost"  # a budget's counter: what the run spent


@dataclass(frozen=True)
class History:
    """What a run's records say as one of its entries begins (one read, :func:`history`)."""

    seen_before: bool  # it has recorded actions, or has completed before: this entry is a retry
    now: float  # the database's time of the read: when the entry began
    escalated_at: float | None  # when its latest escalation was made, if that is its ending
    picked_up_at: float | None  # when an entry first began after an escalation, if one did
    wall_clock_ms: float  # the run's totals so far
    reads: float
    cost: float | None  # what its budget counted as spent, if it has one


@dataclass(frozen=True)
class Totals:
    """The run's totals once an entry is added: what telemetry puts on the run's span."""

    wall_clock_ms: float
    reads: float
    cost: float | None


def history(store: Store, run_id: str) -> History:
    """The run's history as an entry begins: one read, each of its parts a lookup by key."""
    with store.one_read() as conn:
        return _history(conn, store, run_id)


def _history(conn: Connection, store: Store, run_id: str) -> History:
    sql = store.statement("run history", lambda: _read_history(store.dialect))
    seen, now, escalated, picked, wall, reads, cost = conn.exec_driver_sql(
        sql, {"run": run_id}
    ).one()
    return History(bool(seen), float(now), _float(escalated), _float(picked), float(wall or 0.0),
                   float(reads or 0.0), _float(cost))  # fmt: skip


def _read_history(dialect: str) -> Select[Any]:
    """The read of :func:`history`: lookups by key, and the clock."""
    c, run_id = run_counters.c, bindparam("run", type_=Text)

    def counter(name: str) -> Any:
        return select(c.value).where(c.run_id == run_id, c.name == fixed(name)).scalar_subquery()

    acted = select(effects.c.key).where(effects.c.run_id == run_id)
    escalated = select(runs.c.updated_at).where(
        runs.c.run_id == run_id, runs.c.status == fixed("escalated")
    )
    return select(
        or_(exists(acted), counter(COMPLETED_AT).is_not(None)),
        dialect_of(dialect).now(),
        escalated.scalar_subquery(),
        counter(PICKED_UP_AT),
        counter(WALL_CLOCK_MS),
        counter(READS),
        counter(COST),
    )


def _float(value: float | None) -> float | None:
    return None if value is None else float(value)


def add_entry(
    store: Store,
    run_id: str,
    *,
    history: History | None = None,
    spent: bool = True,
    trigger: str | None,
    wall_clock_ms: float,
    tool_calls: int,
    reads: int,
    completed: bool,
    escalated: bool = False,
) -> Totals:
    """Add one entry of the run to its counters, in one statement that is its own transaction,
    and return the run's totals. ``history``: read as the entry began (:func:`history`), which
    dates the entry and gives the totals before it. Without it (that read failed, or had not
    finished), or when the run's budget counted money ``spent`` during the entry, the history
    is read here first, in one transaction with the write; without it the entry's start is
    estimated as the database's time less ``wall_clock_ms``. ``escalated``: this entry ended by
    escalating the run."""
    counted: dict[str, float | None] = {
        WALL_CLOCK_MS: wall_clock_ms,
        TOOL_CALLS: tool_calls,  # written at 0 too: the runs by tool calls count it
        # No row is as good as 0 to every reader, and adding 0 changes none: one row less.
        **({READS: reads} if reads else {}),
        **({COMPLETED_AT: None} if completed else {}),  # None: the database's time now
    }
    if history is not None and not spent:
        with store.one_write() as conn:  # on PostgreSQL the statement is its transaction
            _write(conn, store, run_id, counted | _dated(history, history.now, trigger, escalated))
        return Totals(history.wall_clock_ms + wall_clock_ms, history.reads + reads, history.cost)
    with store.tx() as conn:
        now = _history(conn, store, run_id)
        if history is not None:
            entered = history.now
        else:
            history, entered = now, now.now - wall_clock_ms / 1000.0
            if escalated and now.escalated_at is not None:
                # Read now, the escalation is this entry's own. Written late (a busy machine),
                # the estimate can fall after it, and the entry would pick up its own
                # escalation: the charts would show it answered at once.
                entered = min(entered, now.escalated_at)
        _write(conn, store, run_id, counted | _dated(history, entered, trigger, escalated))
    return Totals(now.wall_clock_ms + wall_clock_ms, now.reads + reads, now.cost)


def _dated(
    found: History, entered: float, trigger: str | None, escalated: bool
) -> dict[str, float | None]:
    """The counters that date an entry: when it began, its trigger (kept at the time it was
    first seen), and, unless it escalated the run, the escalation it picked up."""
    rows: dict[str, float | None] = {ENTERED_AT: entered}
    if trigger is not None:
        rows[TRIGGER + trigger] = entered
    return rows if escalated else rows | _pick_up(found, entered)


def add_bare_entry(store: Store, run_id: str, trigger: str) -> str:
    """Record an entry whose end is never seen: ``trigger``, or ``"retry"`` when the run had
    been here before, at the database's time, in one transaction. Returns what was recorded."""
    with store.tx() as conn:
        found = _history(conn, store, run_id)
        chosen = "retry" if found.seen_before else trigger
        _write(conn, store, run_id, _dated(found, found.now, chosen, False))
    return chosen


def _pick_up(found: History, entered: float) -> dict[str, float | None]:
    """An entry that began after the run's latest escalation picks it up: the first such entry
    is kept, so the console can chart how long each escalation waited for a person."""
    escalated = found.escalated_at
    if escalated is not None and entered > escalated and (found.picked_up_at or 0.0) < escalated:
        return {PICKED_UP_AT: entered}
    return {}


def triggers(store: Store, run_id: str) -> list[str]:
    """The triggers a run was entered with, oldest first."""
    stmt = select(run_counters.c.name).where(
        run_counters.c.run_id == run_id, run_counters.c.name.like(TRIGGER + "%")
    )
    return [name[len(TRIGGER) :] for (name,) in store.rows(stmt.order_by(run_counters.c.value))]


def forget(conn: Connection, *, run_id: str | None = None, before: float | None = None) -> None:
    """Delete the "run." counters of one run (``delete_run``), or of runs last entered before
    ``before`` (``gc``), in the caller's transaction. A budget's counters are left as they are."""
    mine = run_counters.c.name.like(PREFIX + "%")
    if run_id is not None:
        conn.execute(delete(run_counters).where(mine, run_counters.c.run_id == run_id))
    if before is not None:
        old = select(run_counters.c.run_id).where(
            run_counters.c.name == ENTERED_AT, run_counters.c.value < before
        )
        conn.execute(delete(run_counters).where(mine, run_counters.c.run_id.in_(old)))


def counters_in(conn: Connection, run_id: str) -> dict[str, float]:
    rows = conn.execute(
        select(run_counters.c.name, run_counters.c.value).where(run_counters.c.run_id == run_id)
    ).all()
    return {name: float(value) for name, value in rows}


# Counters an entry adds to; the rest are replaced, but a trigger keeps the time first seen.
_SUMMED = (WALL_CLOCK_MS, READS, TOOL_CALLS)


def _write(conn: Connection, store: Store, run_id: str, rows: dict[str, float | None]) -> None:
    """Write ``rows`` (counter: value, None for the database's time now) of the run in one
    statement, each created if it is new, the summed ones added race-free however many workers
    end entries of the run at once."""
    n = len(rows)
    sql = store.statement(("run counters", n), lambda: _upsert(store.dialect, n))
    params: dict[str, Any] = {"run": run_id}
    for i, (name, value) in enumerate(rows.items()):
        params[f"n{i}"], params[f"v{i}"] = name, value
    conn.exec_driver_sql(sql, params)


def _upsert(dialect: str, n: int) -> Any:
    """The statement of ``_write`` for ``n`` rows: parameters ``run``, then ``n0``, ``v0`` (the
    first row's name and value, NULL for the database's time now) and so on."""
    c, sql = run_counters.c, dialect_of(dialect)
    stmt = sql.insert(run_counters).values(
        [
            {
                "run_id": bindparam("run"),
                "name": bindparam(f"n{i}"),
                "value": func.coalesce(bindparam(f"v{i}", type_=Float), sql.now()),
            }
            for i in range(n)
        ]
    )
    given = stmt.excluded.value
    summed = c.name.in_([fixed(name) for name in _SUMMED])
    return stmt.on_conflict_do_update(
        index_elements=["run_id", "name"],
        set_={"value": case((summed, c.value + given), else_=given)},
        # A trigger keeps the time it was first seen.
        where=~c.name.startswith(fixed(TRIGGER)),
    )
