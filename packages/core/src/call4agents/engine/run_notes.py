"""What a run did as a whole: its trigger, its tool calls, its time, how it ended.

``c4a.run(...)`` reads the run's history once as it is entered, notes each tool call made inside
it (how many, and whether any was a ``read``) and, when the outermost block of the run leaves,
writes the entry to the run's counters in one statement (``c4a_run_counters``, names under
``run.``, see ``storage.run_rows``) and hands a :class:`RunSummary` to telemetry: the span
around the run gets its trigger, terminal reason, cost and wall-clock time.

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
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, cast

from call4agents.engine import observe
from call4agents.engine.context import soon
from call4agents.engine.default import default_or_none
from call4agents.model.errors import ApprovalRequired, ConfigurationError, LedgerError
from call4agents.storage import run_controls, run_rows
from call4agents.storage.run_rows import (
    COMPLETED_AT,
    COST,
    ENTERED_AT,
    READS,
    TOOL_CALLS,
    WALL_CLOCK_MS,
)

if TYPE_CHECKING:
    from call4agents.engine.ledger_core import LedgerCore

    from .context import Trigger

log = logging.getLogger("call4agents")

TRIGGERS = ("user", "schedule", "webhook", "retry")
COMPLETED = "completed"
ERROR = "error"

# Counter names in c4a_run_counters; the "run." prefix keeps them apart from a budget's.


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
    ledger: LedgerCore | None
    trigger: str | None
    started: float = field(default_factory=time.perf_counter)
    depth: int = 1
    by_steps: bool = False  # opened by a framework's step, not by a `c4a.run` block
    tool_calls: int = 0
    reads: int = 0
    # The run's records as this entry began, among them whether it had recorded actions (or had
    # completed) before: the ledger's "retry". Read as the run is entered; None while that read
    # is pending or impossible (the exit then reads it, and estimates when the entry began).
    history: run_rows.History | None = None
    spent: bool = False  # the run's budget counted money spent during this entry


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


# Ordered: dropping the oldest of a full dict scans past every slot emptied before it.
_open: OrderedDict[str, Notes] = OrderedDict()
_KEPT = 10_000
_lock = threading.Lock()


def enter(
    run_id: str, ledger: LedgerCore | None, trigger: str | None, *, by_steps: bool = False
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
                _open.popitem(last=False)
            _open[run_id] = found = Notes(run_id, ledger, trigger, by_steps=by_steps)
            return found
        found.depth += 1
        found.trigger = found.trigger or trigger
        found.ledger = found.ledger or ledger
        return None


def look_back(notes: Notes) -> None:
    """Read whether the run had been here before (then this entry is a retry), when the entry
    began and what escalation it may pick up. One indexed read per run entered; a database
    fault leaves it unknown rather than failing the run. Sent to a worker thread from a running
    event loop (``context.soon``), its answer is used by the exit if it has come by then."""

    ledger = notes.ledger or default_or_none()
    if ledger is None:
        return
    try:
        notes.history = run_rows.history(ledger.store, notes.run_id)
        if not notes.history.seen_before:
            # Nothing to repeat: the run's first action need not read before it claims, so
            # this read costs what that one would have.
            ledger.recent.wrote_intent(notes.run_id)
    except LedgerError as fault:
        log.warning("could not read the history of run %r: %s", notes.run_id, fault)


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


def note_spent(run_id: str) -> None:
    """The budget of run ``run_id`` counted money spent: its total is read as the entry ends."""
    found = _open.get(run_id)
    if found is not None:
        found.spent = True


def ending_of(exc: BaseException | None) -> tuple[str | None, str | None]:
    """(terminal reason, escalation reason) of an exception leaving the run."""
    from call4agents.engine.endings import Escalated
    from call4agents.model.errors import BudgetExceeded

    if exc is None:
        return COMPLETED, None
    if isinstance(exc, Escalated):
        return "escalated", exc.handoff.reason
    if isinstance(exc, BudgetExceeded):
        return exc.reason, None
    if isinstance(exc, ApprovalRequired) or not isinstance(exc, Exception):
        return None, None  # a pause for a person, a cancellation: the run is not over
    return ERROR, None


def finish(notes: Notes, exc: BaseException | None, *, off_loop: bool = False) -> RunSummary:
    """Record the entry in the ledger (one statement) and tell telemetry. ``off_loop``: on a
    running event loop's thread (a plain ``with`` inside a coroutine) the write goes to a worker
    thread, and telemetry gets what is known in memory (the ledger's retry verdict is in the
    record)."""
    written = soon(settle, notes, exc) if off_loop else settle(notes, exc)
    summary = written or _summary(notes, exc)
    observe.telemetry().run_left(summary)
    return summary


async def afinish(notes: Notes, exc: BaseException | None) -> RunSummary:
    """``finish`` with its write off the event loop's thread."""
    summary = await asyncio.to_thread(settle, notes, exc)
    observe.telemetry().run_left(summary)
    return summary


def settle(notes: Notes, exc: BaseException | None) -> RunSummary:
    """Write the entry to the run's counters. A database fault is logged, never raised: the
    run's own outcome must not change because its telemetry could not be written."""

    summary = _summary(notes, exc)
    ledger = notes.ledger or default_or_none()
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
        "retry" if notes.history is not None and notes.history.seen_before else notes.trigger,
        reason,
        (time.perf_counter() - notes.started) * 1000.0,
        notes.tool_calls,
        notes.reads,
        None if reason != COMPLETED else notes.reads == 0,
        None,
        escalation,
    )


def _record(ledger: LedgerCore, notes: Notes, summary: RunSummary) -> RunSummary:
    """One statement adds this entry to the run's counters (see ``run_rows.add_entry``)."""
    totals = run_rows.add_entry(
        ledger.store,
        notes.run_id,
        history=notes.history,
        spent=notes.spent,
        trigger=summary.trigger,
        wall_clock_ms=summary.wall_clock_ms,
        tool_calls=summary.tool_calls,
        reads=summary.reads,
        completed=summary.terminal_reason == COMPLETED,
        escalated=summary.terminal_reason == "escalated",
    )
    # The run's totals over every entry, where this entry's summary has its own.
    return replace(
        summary,
        wall_clock_ms=totals.wall_clock_ms,
        without_read=None if summary.terminal_reason != COMPLETED else totals.reads == 0,
        cost_spent=totals.cost,
    )


def record_entry(ledger: LedgerCore | None, run_id: str, trigger: str) -> str | None:
    """An entry into a run whose end this process never sees (an MCP server's run of a caller):
    its trigger, or ``"retry"`` when the run had been here before, recorded at once in one
    transaction. Returns what was recorded; a database fault is logged and gives None."""
    ledger = ledger or default_or_none()
    if ledger is None:
        return None
    try:
        return run_rows.add_bare_entry(ledger.store, run_id, trigger)
    except LedgerError as fault:
        log.warning("could not record the entry into run %r: %s", run_id, fault)
        return None


def run_document(ledger: LedgerCore, run_id: str) -> dict[str, Any] | None:
    """The run's own record for ``call4agents show --json``; None if it was never recorded."""
    values = run_controls.counted(ledger.store, [run_id])[0][run_id]
    if ENTERED_AT not in values:
        return None
    completed = COMPLETED_AT in values
    return {
        "triggers": run_rows.triggers(ledger.store, run_id),
        "wall_clock_ms": values.get(WALL_CLOCK_MS, 0.0),
        "tool_calls": int(values.get(TOOL_CALLS, 0)),
        "reads": int(values.get(READS, 0)),
        "completed": completed,
        "completed_without_read": completed and not values.get(READS),
        "cost_spent": values.get(COST),
    }


def run_text(ledger: LedgerCore, run_id: str) -> str | None:
    """One line for ``call4agents show``: trigger, time, tool calls, reads; None if unknown."""
    values = run_controls.counted(ledger.store, [run_id])[0][run_id]
    if ENTERED_AT not in values:
        return None
    found = run_rows.triggers(ledger.store, run_id)
    parts = [f"trigger {' then '.join(found) if found else 'not given'}"]
    parts.append(f"{values.get(WALL_CLOCK_MS, 0.0):.0f} ms inside the run")
    parts.append(f"{int(values.get(TOOL_CALLS, 0))} tool calls, {int(values.get(READS, 0))} reads")
    if COMPLETED_AT in values:
        flag = " WITHOUT ANY READ (claims without evidence?)" if not values.get(READS) else ""
        parts.append(f"completed{flag}")
    return "Run: " + ", ".join(parts)


__all__ = ["TRIGGERS", "RunSummary", "check_trigger"]
