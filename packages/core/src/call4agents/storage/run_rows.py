"""A run's own record: one row per counter in ``c4a_run_counters`` under the names below.

Written once per entry of a run, when its outermost block leaves (``engine.run_notes``); read by
``call4agents show``, ``stats`` and the alerts. A budget keeps its counters in the same table
under names without the ``run.`` prefix.
"""

from __future__ import annotations

from sqlalchemy import Connection, delete, exists, or_, select, update

from .store import Store, clock, dialect_insert
from .tables import effects, run_counters, runs

PREFIX = "run."
TRIGGER = "run.trigger:"  # one row per trigger seen, valued the database time it was first seen
ENTERED_AT = "run.entered_at"  # when the latest entry began: a later one picks up an escalation
WALL_CLOCK_MS = "run.wall_clock_ms"  # time spent inside the run, summed over its entries
TOOL_CALLS = "run.tool_calls"
READS = "run.reads"
COMPLETED_AT = "run.completed_at"
# When the run was first entered after its latest escalation: the escalation was picked up.
PICKED_UP_AT = "run.picked_up_at"


def seen_before(store: Store, run_id: str) -> bool:
    """Whether the run has recorded actions, or has completed before."""
    with store.read() as conn:
        return _seen_before(conn, run_id)


def _seen_before(conn: Connection, run_id: str) -> bool:
    done = select(run_counters.c.value).where(
        run_counters.c.run_id == run_id, run_counters.c.name == COMPLETED_AT
    )
    acted = select(effects.c.key).where(effects.c.run_id == run_id)
    return bool(conn.execute(select(or_(exists(acted), exists(done)))).scalar_one())


def add_entry(
    store: Store,
    run_id: str,
    *,
    trigger: str | None,
    wall_clock_ms: float,
    tool_calls: int,
    reads: int,
    completed: bool,
    escalated: bool = False,
) -> tuple[dict[str, float], dict[str, float]]:
    """Add one entry of the run to its counters, in one transaction: (before, after).
    ``escalated``: this entry ended by escalating the run."""
    dialect = store.dialect
    with store.tx() as conn:
        now = clock(conn)
        entered = now - wall_clock_ms / 1000.0
        if escalated:
            # The entry began before it escalated. Its start is estimated from the database's
            # time now less the time the caller measured, and on a busy machine the write can
            # come late enough to put that estimate after the escalation: the entry would then
            # pick up its own escalation, and the charts show it answered at once.
            entered = min(entered, _escalated_at(conn, run_id) or entered)
        before = counters_in(conn, run_id)
        after = {
            ENTERED_AT: entered,
            WALL_CLOCK_MS: before.get(WALL_CLOCK_MS, 0.0) + wall_clock_ms,
            READS: before.get(READS, 0.0) + reads,
            TOOL_CALLS: before.get(TOOL_CALLS, 0.0) + tool_calls,
            **({COMPLETED_AT: now} if completed else {}),
        }
        if trigger is not None:
            _put(conn, dialect, run_id, TRIGGER + trigger, entered)
        for name, value in after.items():
            _put(conn, dialect, run_id, name, value, replace=True)
        if not escalated:
            _note_pick_up(conn, dialect, run_id, entered, before.get(PICKED_UP_AT))
    return before, {**before, **after}


def add_bare_entry(store: Store, run_id: str, trigger: str) -> str:
    """Record an entry whose end is never seen: ``trigger``, or ``"retry"`` when the run had
    been here before, at the database's time, in one transaction. Returns what was recorded."""
    dialect = store.dialect
    with store.tx() as conn:
        now = clock(conn)
        found = "retry" if _seen_before(conn, run_id) else trigger
        _put(conn, dialect, run_id, TRIGGER + found, now)
        _put(conn, dialect, run_id, ENTERED_AT, now, replace=True)
        picked = conn.execute(
            select(run_counters.c.value).where(
                run_counters.c.run_id == run_id, run_counters.c.name == PICKED_UP_AT
            )
        ).scalar()
        _note_pick_up(conn, dialect, run_id, now, picked)
    return found


def _note_pick_up(
    conn: Connection, dialect: str, run_id: str, entered: float, picked: float | None
) -> None:
    """An entry that began after the run's latest escalation picks it up: the first such entry
    is kept, so the console can chart how long each escalation waited for a person."""
    escalated = _escalated_at(conn, run_id)
    if escalated is not None and entered > escalated and (picked or 0.0) < escalated:
        _put(conn, dialect, run_id, PICKED_UP_AT, entered, replace=True)


def _escalated_at(conn: Connection, run_id: str) -> float | None:
    """When the run last escalated, if an escalation is its ending."""
    found = conn.execute(
        select(runs.c.updated_at).where(runs.c.run_id == run_id, runs.c.status == "escalated")
    ).scalar()
    return None if found is None else float(found)


def counters(store: Store, run_id: str) -> dict[str, float]:
    with store.read() as conn:
        return counters_in(conn, run_id)


def triggers(store: Store, run_id: str) -> list[str]:
    """The triggers a run was entered with, oldest first."""
    with store.read() as conn:
        rows = conn.execute(
            select(run_counters.c.name)
            .where(run_counters.c.run_id == run_id, run_counters.c.name.like(TRIGGER + "%"))
            .order_by(run_counters.c.value)
        ).scalars()
        return [name[len(TRIGGER) :] for name in rows]


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


def _put(
    conn: Connection, dialect: str, run_id: str, name: str, value: float, *, replace: bool = False
) -> None:
    insert = dialect_insert(dialect)
    conn.execute(
        insert(run_counters)
        .values(run_id=run_id, name=name, value=value)
        .on_conflict_do_nothing(index_elements=["run_id", "name"])
    )
    if replace:
        conn.execute(
            update(run_counters)
            .where(run_counters.c.run_id == run_id, run_counters.c.name == name)
            .values(value=value)
        )
