"""Undo: reverse a run's succeeded actions, newest first, each undo once-only.

An undo is registered with the tool, ``@c4a.effect(undo=refund)`` (or ``undo=`` in an
integration's per-tool options), and is called as::

    refund(result, **arguments)

``result`` is the action's recorded result (decoded as the tool returned it) and ``arguments``
are its arguments as the ledger recorded them: the canonical JSON form (a datetime as its ISO
text, a model as a dict), with redacted values masked as ``"***"``, so an undo that needs a
secret takes it from its own configuration. Inside the undo ``c4a.current()`` describes the undo
itself; forward its ``idempotency_key`` to the provider's reversing call.

Each undo runs as its own action (tool ``undo:<tool>``, keyed by the original action's key) in
the same run, so a crash half-way and a second ``undo`` continue where it stopped, and an undo
that may have happened is in doubt, never run again blindly.

The registry is filled when a tool is decorated (or its options are built), so a process that
undoes a run must import the module that defines the tools: ``call4agents undo RUN --import
myapp.tools``, or pass ``ledger.undo(run_id, undos={"tool": fn})``.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from call4agents.engine.undos import UndoFn, undo_for
from call4agents.model.errors import (
    Call4AgentsError,
    EffectInDoubt,
    EffectInProgress,
    LedgerError,
    ResultNotStored,
)

if TYPE_CHECKING:
    from call4agents.engine.action import Action
    from call4agents.engine.ledger_core import LedgerCore
    from call4agents.engine.records import EffectRecord

UNDO_PREFIX = "undo:"

# Outcomes of one action in an undo report. Only the first two count as reversed.
UNDONE = "undone"  # reversed by this call
ALREADY_UNDONE = "already_undone"  # reversed by an earlier call
NO_UNDO = "no_undo"  # no undo registered for the tool in this process
IN_DOUBT = "in_doubt"  # the action itself may or may not have happened (or still runs)
RESULT_MISSING = "result_missing"  # pruned by gc or never stored: the undo has nothing to go by
UNDO_FAILED = "undo_failed"  # the undo raised an error meaning it did not act; a later undo retries
UNDO_IN_DOUBT = "undo_in_doubt"  # the undo may or may not have happened: settle it, never re-run
UNDO_RUNNING = "undo_running"  # another worker is running this undo now
REVERSED = (UNDONE, ALREADY_UNDONE)


@dataclass(frozen=True)
class UndoItem:
    """What happened to one action of the run."""

    tool: str
    key: str
    args: dict[str, Any]
    outcome: str  # one of the outcome names above
    detail: str
    undo_result: Any = None

    @property
    def reversed(self) -> bool:
        return self.outcome in REVERSED

    def as_dict(self) -> dict[str, Any]:
        return {
            "tool": self.tool,
            "key": self.key,
            "args": self.args,
            "outcome": self.outcome,
            "detail": self.detail,
            "undo_result": self.undo_result,
        }


@dataclass(frozen=True)
class UndoReport:
    """The outcome of ``ledger.undo(run_id)``: every succeeded or open action, newest first."""

    run_id: str
    status: str  # "undone" when every action was reversed, else "partly_undone"
    items: list[UndoItem]

    @property
    def complete(self) -> bool:
        return self.status == "undone"

    @property
    def not_reversed(self) -> list[UndoItem]:
        """The actions left as they were, each with why: never skipped silently."""
        return [i for i in self.items if not i.reversed]

    def as_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "status": self.status,
            "items": [i.as_dict() for i in self.items],
        }

    def text(self) -> str:
        lines = [f"Run {self.run_id}: {self.status.replace('_', ' ')}"]
        width = max((len(i.tool) for i in self.items), default=0)
        for i in self.items:
            lines.append(f"  {i.outcome:<14}  {i.tool:<{width}}  {i.detail}")
        if not self.items:
            lines.append("  (no actions to undo)")
        return "\n".join(lines)


def undo_run(
    ledger: LedgerCore, run_id: str, *, undos: Mapping[str, UndoFn] | None = None
) -> UndoReport:
    """Reverse the run's succeeded actions newest first; see the module docstring."""
    from call4agents.engine.endings import PARTLY_UNDONE, UNDONE, record_status

    ledger.sweep()  # a dead worker's action is in doubt, not running
    records = [r for r in ledger.effects(run_id) if not r.tool.startswith(UNDO_PREFIX)]
    if not records:
        raise LedgerError(f"no actions recorded for run {run_id!r}: check the run id")
    items: list[UndoItem] = []
    for record in reversed(records):
        if record.state == "failed":
            continue  # it did not act: there is nothing to reverse
        fn = (undos or {}).get(record.tool) or undo_for(record.tool)
        items.append(_undo_one(ledger, record, fn))
    status = UNDONE if all(i.reversed for i in items) else PARTLY_UNDONE
    report = UndoReport(run_id, status, items)
    missing = len(report.not_reversed)
    reason = "every action was reversed" if not missing else f"{missing} action(s) not reversed"
    record_status(ledger, run_id, status, reason, "undo", report.as_dict())
    return report


def _undo_one(ledger: LedgerCore, record: EffectRecord, fn: UndoFn | None) -> UndoItem:
    def item(outcome: str, detail: str, result: Any = None) -> UndoItem:
        return UndoItem(record.tool, record.key, record.args, outcome, detail, result)

    if record.state in ("in_doubt", "started"):
        what = "it may or may not have happened" if record.state == "in_doubt" else "still running"
        return item(IN_DOUBT, f"{what}: settle it first (`call4agents resolve {record.key[:12]}`)")
    action = _undo_action(ledger, record)
    done = ledger.find(action.key)
    if done is not None and done.state == "succeeded":
        return item(ALREADY_UNDONE, "reversed by an earlier undo", done.result)
    if fn is None:
        return item(
            NO_UNDO,
            f"no undo registered for {record.tool} in this process: give the tool undo=, or "
            "import the module that defines it (`call4agents undo RUN --import myapp.tools`)",
        )
    if record.pruned_at is not None or record.result_json is None:
        return item(RESULT_MISSING, "its result was pruned or not stored, so it cannot be undone")
    return _perform_undo(action, record, fn, item)


def _undo_action(ledger: LedgerCore, record: EffectRecord) -> Action:
    from call4agents.engine.action import EffectOptions, prepare

    # Keyed by the original action's key alone: the same undo whatever process runs it.
    options = EffectOptions(name=UNDO_PREFIX + record.tool, kind="write")
    return prepare(
        options.name or "", {"undoes": record.key}, options, run_id=record.run_id, ledger=ledger
    )


def _perform_undo(
    action: Action, record: EffectRecord, fn: UndoFn, item: Callable[..., UndoItem]
) -> UndoItem:
    from call4agents.engine.effect import perform
    from call4agents.engine.verdicts import is_in_doubt_error

    original = record.result
    try:
        result = perform(action, lambda: _call(fn, original, record.args))
    except EffectInDoubt as exc:
        return item(UNDO_IN_DOUBT, f"the undo may or may not have happened ({exc.reason})")
    except EffectInProgress:
        return item(UNDO_RUNNING, "another worker is running this undo now")
    except ResultNotStored:
        return item(UNDONE, "reversed (the undo's own result could not be stored)")
    except Call4AgentsError as exc:
        return item(UNDO_FAILED, f"not reversed: {exc}")
    except Exception as exc:  # noqa: BLE001 - any error of the undo is reported, by name
        text = action.error_text(exc)
        if is_in_doubt_error(exc, action.options):
            return item(UNDO_IN_DOUBT, f"the undo may or may not have happened ({text})")
        return item(UNDO_FAILED, f"the undo failed and did not act: {text}")
    return item(UNDONE, "reversed", result)


def _call(fn: UndoFn, result: Any, arguments: Mapping[str, Any]) -> Any:
    done = fn(result, **arguments)
    if inspect.isawaitable(done):  # an async undo, run to completion from this sync caller
        return asyncio.run(_wait(done))
    return done


async def _wait(awaitable: Any) -> Any:
    return await awaitable
