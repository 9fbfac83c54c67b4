"""What a run did as a whole: its trigger, its tool calls, its time, how it ended.

``c4a.run(...)`` notes each tool call made inside it (how many, and whether any was a ``read``)
and, when the outermost block of the run leaves, writes one small transaction to the run's
counters (``c4a_run_counters``, names under ``run.``) and hands a :class:`RunSummary` to
telemetry: the span around the run gets its trigger, terminal reason, cost and wall-clock time.

``trigger="retry"`` is never given by the caller's code alone: the ledger sets it when the run is
entered again after it had already recorded actions (a resume, a re-delivered job).

"Claims vs evidence": a run that completed without ever calling a ``read`` tool is flagged.
An agent that reports success without having looked at anything is almost always wrong.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from sqlalchemy import Connection, delete, exists, or_, select, update

from . import observe
from .errors import ApprovalRequired, ConfigurationError, LedgerError
from .store import dialect_insert, now_sql
from .tables import effects, run_counters

if TYPE_CHECKING:
    from .context import Trigger
    from .ledger import Ledger

log = logging.getLogger("call4agents")

TRIGGERS = ("user", "schedule", "webhook", "retry")
COMPLETED = "completed"
ERROR = "error"

# Counter names in c4a_run_counters; the "run." prefix keeps them apart from a budget's.
PREFIX = "run."
TRIGGER = "run.trigger:"  # one row per trigger seen, valued the database time it was first seen
ENTERED_AT = "run.entered_at"  # when the latest entry began: a later one picks up an escalation
WALL_CLOCK_MS = "run.wall_clock_ms"  # time spent inside the run, summed over its entries
TOOL_CALLS = "run.tool_calls"
READS = "run.reads"
COMPLETED_AT = "run.completed_at"


def check_trigger(value: object, where: str = "c4a.run") -> Trigger | None:
    """``value`` if it is one of TRIGGERS (or None); else a one-line ConfigurationError."""
    if value is None or value in TRIGGERS:
        return cast("Trigger | None", value)
    raise ConfigurationError(
        f"{where}(trigger={value!r}) is not a known trigger: use one of "
        f"{', '.join(map(repr, TRIGGERS))} ('retry' is also set by the ledger itself)"
    )


@dataclass
class Notes:
    """Counted in memory while a run is open in this process."""

    run_id: str
    ledger: Ledger | None
    trigger: str | None
    started: float = field(default_factory=time.perf_counter)
    depth: int = 1
    by_steps: bool = False  # opened by a framework's step, not by a `c4a.run` block
    tool_calls: int = 0
    reads: int = 0
    # Whether the run had recorded actions (or had completed) before this entry: the ledger's
    # "retry". Read as the run is entered; None while that read is pending or impossible.
    seen_before: bool | None = None


@dataclass(frozen=True)
class RunSummary:
    """One entry of a run as it left ``c4a.run``: what telemetry puts on the run's span."""

    run_id: str
    trigger: str | None
    terminal_reason: str | None  # None: paused (an approval) or interrupted, not ended
    wall_clock_ms: float  # summed over every entry the ledger knows of
    tool_calls: int
    reads: int
    without_read: bool | None  # completed with no read tool ever called; None if not completed
    cost_spent: float | None  # from the budget's counters, when the run has any
    escalation_reason: str | None


_open: dict[str, Notes] = {}
_KEPT = 10_000
_lock = threading.Lock()


def enter(
    run_id: str, ledger: Ledger | None, trigger: str | None, *, by_steps: bool = False
) -> Notes | None:
    """The outermost (or a nested) block of ``run_id`` began in this process; the new notes
    when it is the outermost (see :func:`look_back` for the ledger's read). ``by_steps``: opened
    by a framework's first step, to be ended by its final answer (:func:`leave_steps`)."""
    with _lock:
        found = _open.get(run_id)
        if found is None:
            if len(_open) >= _KEPT and run_id not in _open:
                # Runs that never reached their end (a thread left waiting forever): the oldest
                # goes, so a long-lived worker's memory stays bounded.
                _open.pop(next(iter(_open)))
            _open[run_id] = found = Notes(run_id, ledger, trigger, by_steps=by_steps)
            return found
        found.depth += 1
        found.trigger = found.trigger or trigger
        found.ledger = found.ledger or ledger
        return None


def look_back(notes: Notes) -> None:
    """Read whether the run had been here before (then this entry is a retry). One indexed
    read per run entered; a database fault leaves it unknown rather than failing the run."""
    from .effect import _default_ledger

    ledger = notes.ledger or _default_ledger
    if ledger is None:
        return
    try:
        with ledger.store.read() as conn:
            notes.seen_before = _seen_before(conn, notes.run_id)
    except LedgerError as fault:
        log.warning("could not read the history of run %r: %s", notes.run_id, fault)


def enter_soon(notes: Notes) -> None:
    """``look_back`` without blocking a running event loop (a plain ``with`` in a coroutine):
    the read goes to a worker thread, and the exit uses it if it has finished by then."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        look_back(notes)
        return
    loop.run_in_executor(None, look_back, notes)


def is_open(run_id: str) -> bool:
    return run_id in _open


def leave_steps(run_id: str) -> Notes | None:
    """A framework's run ended at its final answer: its notes, if a step opened them."""
    with _lock:
        found = _open.get(run_id)
        if found is None or not found.by_steps:
            return None
        return _open.pop(run_id)


def leave(run_id: str) -> Notes | None:
    """A block of ``run_id`` ended; the notes once its outermost block has."""
    with _lock:
        found = _open.get(run_id)
        if found is None:
            return None
        found.depth -= 1
        if found.depth > 0:
            return None
        return _open.pop(run_id)


def note_tool(run_id: str | None, kind: str) -> None:
    """A tool call of ``kind`` was made in run ``run_id`` (a dict read and an add: no I/O)."""
    if run_id is None:
        return
    found = _open.get(run_id)
    if found is not None:
        found.tool_calls += 1
        if kind == "read":
            found.reads += 1


def ending_of(exc: BaseException | None) -> tuple[str | None, str | None]:
    """(terminal reason, escalation reason) of an exception leaving the run."""
    from .runs import BudgetExceeded, Escalated

    if exc is None:
        return COMPLETED, None
    if isinstance(exc, Escalated):
        return "escalated", exc.handoff.reason
    if isinstance(exc, BudgetExceeded):
        return exc.reason, None
    if isinstance(exc, ApprovalRequired) or not isinstance(exc, Exception):
        return None, None  # a pause for a person, a cancellation: the run is not over
    return ERROR, None


def finish(notes: Notes, exc: BaseException | None, *, write: bool = True) -> RunSummary:
    """Record the entry in the ledger (one transaction) and tell telemetry."""
    summary = settle(notes, exc) if write else _summary(notes, exc)
    observe.run_left(summary)
    return summary


async def afinish(notes: Notes, exc: BaseException | None) -> RunSummary:
    """``finish`` with its write off the event loop's thread."""
    summary = await asyncio.to_thread(settle, notes, exc)
    observe.run_left(summary)
    return summary


def settle(notes: Notes, exc: BaseException | None) -> RunSummary:
    """Write the entry to the run's counters. A database fault is logged, never raised: the
    run's own outcome must not change because its telemetry could not be written."""
    from .effect import _default_ledger

    summary = _summary(notes, exc)
    ledger = notes.ledger or _default_ledger
    if ledger is None:
        return summary
    try:
        return _record(ledger, notes, summary)
    except LedgerError as fault:
        log.warning("could not record the end of run %r: %s", notes.run_id, fault)
        return summary


def _summary(notes: Notes, exc: BaseException | None) -> RunSummary:
    reason, escalation = ending_of(exc)
    return RunSummary(
        notes.run_id,
        "retry" if notes.seen_before else notes.trigger,
        reason,
        (time.perf_counter() - notes.started) * 1000.0,
        notes.tool_calls,
        notes.reads,
        None if reason != COMPLETED else notes.reads == 0,
        None,
        escalation,
    )


def _record(ledger: Ledger, notes: Notes, summary: RunSummary) -> RunSummary:
    """One transaction: was the run here before (then it is a retry), add this entry."""
    dialect = ledger.store.dialect
    with ledger.store.tx() as conn:
        now = float(conn.execute(select(now_sql(dialect))).scalar_one())
        entered = now - summary.wall_clock_ms / 1000.0
        before = _counters(conn, notes.run_id)
        trigger = summary.trigger
        if trigger is not None:
            _put(conn, dialect, notes.run_id, TRIGGER + trigger, entered)
        _put(conn, dialect, notes.run_id, ENTERED_AT, entered, replace=True)
        total_ms = before.get(WALL_CLOCK_MS, 0.0) + summary.wall_clock_ms
        reads = before.get(READS, 0.0) + summary.reads
        _put(conn, dialect, notes.run_id, WALL_CLOCK_MS, total_ms, replace=True)
        _put(conn, dialect, notes.run_id, READS, reads, replace=True)
        calls = before.get(TOOL_CALLS, 0.0) + summary.tool_calls
        _put(conn, dialect, notes.run_id, TOOL_CALLS, calls, replace=True)
        if summary.terminal_reason == COMPLETED:
            _put(conn, dialect, notes.run_id, COMPLETED_AT, now, replace=True)
    return RunSummary(
        summary.run_id,
        trigger,
        summary.terminal_reason,
        total_ms,
        summary.tool_calls,
        summary.reads,
        None if summary.terminal_reason != COMPLETED else reads == 0,
        before.get("cost"),
        summary.escalation_reason,
    )


def record_entry(ledger: Ledger | None, run_id: str, trigger: str) -> str | None:
    """An entry into a run whose end this process never sees (an MCP server's run of a caller):
    its trigger, or ``"retry"`` when the run had been here before, recorded at once in one
    transaction. Returns what was recorded; a database fault is logged and gives None."""
    from .effect import _default_ledger

    ledger = ledger or _default_ledger
    if ledger is None:
        return None
    try:
        with ledger.store.tx() as conn:
            now = float(conn.execute(select(now_sql(ledger.store.dialect))).scalar_one())
            found = "retry" if _seen_before(conn, run_id) else trigger
            _put(conn, ledger.store.dialect, run_id, TRIGGER + found, now)
            _put(conn, ledger.store.dialect, run_id, ENTERED_AT, now, replace=True)
    except LedgerError as fault:
        log.warning("could not record the entry into run %r: %s", run_id, fault)
        return None
    return found


def _counters(conn: Connection, run_id: str) -> dict[str, float]:
    rows = conn.execute(
        select(run_counters.c.name, run_counters.c.value).where(run_counters.c.run_id == run_id)
    ).all()
    return {name: float(value) for name, value in rows}


def _seen_before(conn: Connection, run_id: str) -> bool:
    """Whether the run has recorded actions, or has completed before."""
    done = select(run_counters.c.value).where(
        run_counters.c.run_id == run_id, run_counters.c.name == COMPLETED_AT
    )
    acted = select(effects.c.key).where(effects.c.run_id == run_id)
    return bool(conn.execute(select(or_(exists(acted), exists(done)))).scalar_one())


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


def forget(conn: Connection, *, run_id: str | None = None, before: float | None = None) -> None:
    """Delete the "run." counters of one run (``delete_run``), or of runs last entered before
    ``before`` (``gc``). A budget's counters are left as they are."""
    mine = run_counters.c.name.like(PREFIX + "%")
    if run_id is not None:
        conn.execute(delete(run_counters).where(mine, run_counters.c.run_id == run_id))
    if before is not None:
        old = select(run_counters.c.run_id).where(
            run_counters.c.name == ENTERED_AT, run_counters.c.value < before
        )
        conn.execute(delete(run_counters).where(mine, run_counters.c.run_id.in_(old)))


def triggers(ledger: Ledger, run_id: str) -> list[str]:
    """The triggers a run was entered with, oldest first (for ``call4agents show``)."""
    with ledger.store.read() as conn:
        rows = conn.execute(
            select(run_counters.c.name)
            .where(run_counters.c.run_id == run_id, run_counters.c.name.like(TRIGGER + "%"))
            .order_by(run_counters.c.value)
        ).scalars()
        return [name[len(TRIGGER) :] for name in rows]


def run_document(ledger: Ledger, run_id: str) -> dict[str, Any] | None:
    """The run's own record for ``call4agents show --json``; None if it was never recorded."""
    with ledger.store.read() as conn:
        values = _counters(conn, run_id)
    if ENTERED_AT not in values:
        return None
    completed = COMPLETED_AT in values
    return {
        "triggers": triggers(ledger, run_id),
        "wall_clock_ms": values.get(WALL_CLOCK_MS, 0.0),
        "tool_calls": int(values.get(TOOL_CALLS, 0)),
        "reads": int(values.get(READS, 0)),
        "completed": completed,
        "completed_without_read": completed and not values.get(READS),
        "cost_spent": values.get("cost"),
    }


def run_text(ledger: Ledger, run_id: str) -> str | None:
    """One line for ``call4agents show``: trigger, time, tool calls, reads; None if unknown."""
    with ledger.store.read() as conn:
        values = _counters(conn, run_id)
    if ENTERED_AT not in values:
        return None
    found = triggers(ledger, run_id)
    parts = [f"trigger {' then '.join(found) if found else 'not given'}"]
    parts.append(f"{values.get(WALL_CLOCK_MS, 0.0):.0f} ms inside the run")
    parts.append(f"{int(values.get(TOOL_CALLS, 0))} tool calls, {int(values.get(READS, 0))} reads")
    if COMPLETED_AT in values:
        flag = " WITHOUT ANY READ (claims without evidence?)" if not values.get(READS) else ""
        parts.append(f"completed{flag}")
    return "Run: " + ", ".join(parts)


__all__ = ["TRIGGERS", "RunSummary", "check_trigger"]
