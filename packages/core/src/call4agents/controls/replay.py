"""Replay fixtures: a run's recorded actions in a file, served back without running any tool.

    call4agents export ticket-1234 --out incident.json

    with c4a.replay("incident.json"):          # in a regression test
        agent.run(...)                         # each side-effect tool call is served from the file

A call is matched by tool name and canonical arguments (as the ledger shows them, redacted values
masked), in recorded order, each recorded action served once; any call the recording does not
have raises :class:`ReplayMismatch`. Run ids are not compared, so the test may use any run.
Tools of kind ``read``/``none`` are not recorded in the ledger, so they are not replayed.
Each action replays its final recorded outcome: succeeded returns its result, failed raises
:class:`ReplayedFailure`, in doubt raises ``EffectInDoubt``.
"""

from __future__ import annotations

import contextvars
import json
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

from call4agents.engine import observe
from call4agents.engine.steps import in_doubt_error
from call4agents.model.codec import decode_result
from call4agents.model.errors import Call4AgentsError, ResultPruned

if TYPE_CHECKING:
    from call4agents.engine.action import Action
    from call4agents.engine.ledger_core import LedgerCore
    from call4agents.engine.records import EffectRecord

T = TypeVar("T")
FORMAT = "call4agents.replay/1"


class ReplayMismatch(Call4AgentsError):
    """Under replay, a tool was called in a way the recording does not have."""


class ReplayedFailure(Exception):
    """Under replay, the recorded action had failed: this carries its recorded error text."""


# -- export -------------------------------------------------------------------------------------


def export_run(ledger: LedgerCore, run_id: str) -> dict[str, Any]:
    """A run's recorded actions, in order, as one JSON-ready document."""
    found = ledger.effects(run_id)
    if not found:
        from call4agents.model.errors import LedgerError

        raise LedgerError(f"no actions recorded for run {run_id!r} in {ledger.url}")
    return {"format": FORMAT, "run_id": run_id, "actions": [_entry(r) for r in found]}


def _entry(r: EffectRecord) -> dict[str, Any]:
    return {
        "tool": r.tool,
        "kind": r.kind,
        "args": r.args,
        "state": r.state,
        "attempt": r.attempt,
        # The codec's JSON text, so typed results (datetimes, bytes, ...) come back as they were.
        "result": r.result_json,
        "error": r.error,
        "note": r.note,
        "pruned": r.pruned_at is not None,
        "key": r.key,
    }


def load(path: str | Path) -> dict[str, Any]:
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ReplayMismatch(
            f"{path} is not a Call4Agents replay file (format {FORMAT}): make one with "
            "`call4agents export RUN --out FILE`"
        )
    return data


# -- replay -------------------------------------------------------------------------------------


@dataclass
class _Recorded:
    entry: dict[str, Any]
    used: bool = False


class Recording:
    """The recorded actions of one run, consumed in order as calls arrive."""

    def __init__(self, data: dict[str, Any], source: str) -> None:
        self.run_id = str(data.get("run_id"))
        self.source = source
        self.actions = [_Recorded(e) for e in data["actions"]]
        self._lock = threading.Lock()

    def take(self, action: Action) -> dict[str, Any]:
        args = json.loads(action.args_display)
        with self._lock:
            for item in self.actions:
                entry = item.entry
                if not item.used and entry["tool"] == action.tool and entry["args"] == args:
                    item.used = True
                    return entry
        raise ReplayMismatch(
            f"replay of run {self.run_id!r} ({self.source}): {action.tool} was called with "
            f"{action.args_display}, which the recording does not have (or already served). "
            f"Nothing was run. Still unused: {self._unused_text()}"
        )

    def unused(self) -> list[dict[str, Any]]:
        """Recorded actions no call asked for (yet)."""
        return [item.entry for item in self.actions if not item.used]

    def _unused_text(self) -> str:
        left = [f"{e['tool']}({json.dumps(e['args'], sort_keys=True)})" for e in self.unused()]
        return "; ".join(left[:5]) + (" ..." if len(left) > 5 else "") if left else "none"

    def serve(self, action: Action) -> Any:
        entry = self.take(action)
        state = entry["state"]
        if state == "succeeded":
            if entry.get("pruned") or entry.get("result") is None:
                raise ResultPruned(key=action.key, run_id=action.run_id, tool=action.tool)
            return decode_result(entry["result"])
        if state == "failed":
            raise ReplayedFailure(entry.get("error") or f"{action.tool} failed (recorded)")
        why = entry.get("note") or entry.get("error") or "unknown"
        raise in_doubt_error(action, "recorded in doubt: " + why, int(entry.get("attempt") or 1))


_current: contextvars.ContextVar[Recording | None] = contextvars.ContextVar(
    "call4agents_replay", default=None
)


class _ReplayLayer(observe.Layer):
    """Serves actions from the recording of the enclosing ``replay`` block; else passes."""

    def perform(self, action: Action, call: Callable[[], T], inner: observe.Inner[T]) -> T:
        recording = _current.get()
        if recording is None:
            return inner(action, call)
        result: T = recording.serve(action)
        return result

    async def aperform(
        self, action: Action, call: Callable[[], Awaitable[T]], inner: observe.AInner[T]
    ) -> T:
        recording = _current.get()
        if recording is None:
            return await inner(action, call)
        result: T = recording.serve(action)
        return result


_active = 0
_active_lock = threading.Lock()
_LAYER = _ReplayLayer()


class replay:
    """Serve every recorded (write/irreversible) action from an exported run; run no tool.

    ``with c4a.replay("incident.json") as recording:`` (also ``async with``). The layer is only
    installed while some replay block is open, so it costs nothing otherwise.
    """

    def __init__(self, source: str | Path | dict[str, Any]) -> None:
        data = source if isinstance(source, dict) else load(source)
        self.recording = Recording(data, "<dict>" if isinstance(source, dict) else str(source))
        self._token: contextvars.Token[Recording | None] | None = None

    def __enter__(self) -> Recording:
        global _active
        with _active_lock:
            _active += 1
            observe.install("replay", _LAYER)
        self._token = _current.set(self.recording)
        return self.recording

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        global _active
        if self._token is not None:
            _current.reset(self._token)
        with _active_lock:
            _active -= 1
            if _active == 0:
                observe.install("replay", None)

    async def __aenter__(self) -> Recording:
        return self.__enter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.__exit__(exc_type, exc, tb)


# -- diff ---------------------------------------------------------------------------------------

_COMPARED = ("tool", "args", "state", "result", "error")


@dataclass(frozen=True)
class Difference:
    index: int  # 0-based position in the runs' action order
    a: dict[str, Any] | None  # None: run A has no action here
    b: dict[str, Any] | None
    fields: tuple[str, ...]


def diff(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> Difference | None:
    """The first action where two runs differ (tool, arguments, state, result or error)."""
    for i in range(max(len(a), len(b))):
        left = a[i] if i < len(a) else None
        right = b[i] if i < len(b) else None
        if left is None or right is None:
            return Difference(i, left, right, ("missing",))
        fields = tuple(f for f in _COMPARED if left.get(f) != right.get(f))
        if fields:
            return Difference(i, left, right, fields)
    return None


def actions_of(ledger: LedgerCore, run_or_file: str) -> list[dict[str, Any]]:
    """A run's actions from the ledger, or from an exported file when given its path."""
    path = Path(run_or_file)
    if run_or_file.endswith(".json") and path.is_file():
        actions: list[dict[str, Any]] = load(path)["actions"]
        return actions
    return [_entry(r) for r in ledger.effects(run_or_file)]


def render_difference(
    name_a: str, name_b: str, found: Difference | None, sizes: tuple[int, int]
) -> str:
    if found is None:
        return (
            f"Runs {name_a} and {name_b} match: {sizes[0]} action(s), same tools, arguments "
            "and outcomes."
        )
    lines = [
        f"Runs {name_a} and {name_b} first differ at action #{found.index + 1}"
        f" ({', '.join(found.fields)}):"
    ]
    for name, side in ((name_a, found.a), (name_b, found.b)):
        lines.append(f"  {name}: {_describe(side)}")
    return "\n".join(lines)


def _describe(entry: dict[str, Any] | None) -> str:
    if entry is None:
        return "(no action: the run ended before this point)"
    args = json.dumps(entry.get("args"), sort_keys=True, separators=(",", ":"))
    outcome = entry.get("result") if entry.get("state") == "succeeded" else entry.get("error")
    return f"{entry.get('tool')}({args}) -> {entry.get('state')}: {outcome}"
