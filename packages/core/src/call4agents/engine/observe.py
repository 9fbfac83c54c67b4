"""Watching every recorded action: the hook OpenTelemetry and replay plug into.

``effect.perform`` and ``effect.aperform`` read :data:`hook` once per call. While nothing is
installed it is None, so the cost is one global read. A layer wraps the whole action (cache hit,
claim, tool, record), which is what lets a span cover the tool and nest the tool's own spans.

OpenTelemetry plugs in here as a layer: ``call4agents.controls.telemetry`` installs it.
"""

from __future__ import annotations

import importlib
import importlib.util
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from call4agents.engine.context import _effect
from call4agents.engine.verdicts import is_in_doubt_error
from call4agents.model.errors import (
    ApprovalDenied,
    ApprovalRequired,
    EffectInDoubt,
    EffectInProgress,
    ResultNotStored,
    ResultPruned,
)

if TYPE_CHECKING:
    from call4agents.engine.action import Action
    from call4agents.engine.run_notes import RunSummary

T = TypeVar("T")

Outcome = Literal[
    "ok",
    "error",
    "deduped",
    "denied",
    "in_doubt",
    "in_progress",
    "timeout",
    "approval_required",
]

Inner = Callable[["Action", Callable[[], T]], T]
AInner = Callable[["Action", Callable[[], Awaitable[T]]], Awaitable[T]]


class Layer:
    """One thing wrapped around every recorded action. The base class passes straight through."""

    def perform(self, action: Action, call: Callable[[], T], inner: Inner[T]) -> T:
        return inner(action, call)

    async def aperform(
        self, action: Action, call: Callable[[], Awaitable[T]], inner: AInner[T]
    ) -> T:
        return await inner(action, call)

    def run_ended(self, run_id: str, reason: str, *, count: bool = True) -> None:
        """A run control ended run ``run_id`` (escalated, a budget limit, undone).

        Told when the ending is recorded (``count=True``: the runs-ended metric) and again as the
        ending leaves ``c4a.run(...)`` (``count=False``), so the span around the run carries it too.
        """

    def run_left(self, summary: RunSummary) -> None:
        """What one entry of a run did, as its outermost ``c4a.run`` block leaves (see
        ``run_notes``)."""

    def step(self, run_id: str | None, index: int | None, span: object = None) -> Step:
        """A span for one turn of the agent loop, current while it is open (the framework's own
        model span nests under it). ``span``: an instrumentation's own open span of this step,
        which gets the step's attributes instead (no second span). The same cheap no-op object
        while no SDK records anything."""
        return _NO_STEP

    def run_entered(self, run_id: str, trigger: str) -> None:
        """A run was entered with ``trigger``, where its end is never seen (an MCP server's
        run): the current span, the one of the call that entered it, gets the trigger."""

    def resolved(self) -> Layer:
        """The layer that takes the run and step events: itself, unless it stands in for one
        made at first use (telemetry's automatic default)."""
        return self


class _Chain(Layer):
    """Several layers, the first outermost (telemetry sees what replay served)."""

    def __init__(self, layers: list[Layer]) -> None:
        self.layers = layers

    def perform(self, action: Action, call: Callable[[], T], inner: Inner[T]) -> T:
        for layer in reversed(self.layers[1:]):
            inner = _bind(layer, inner)
        return self.layers[0].perform(action, call, inner)

    async def aperform(
        self, action: Action, call: Callable[[], Awaitable[T]], inner: AInner[T]
    ) -> T:
        for layer in reversed(self.layers[1:]):
            inner = _abind(layer, inner)
        return await self.layers[0].aperform(action, call, inner)


def _bind(layer: Layer, inner: Inner[T]) -> Inner[T]:
    return lambda action, call: layer.perform(action, call, inner)


def _abind(layer: Layer, inner: AInner[T]) -> AInner[T]:
    return lambda action, call: layer.aperform(action, call, inner)


# The hook effect.py reads; rebuilt whenever a layer comes or goes.
hook: Layer | None = None
_layers: dict[str, Layer] = {}
_ORDER = ("otel", "replay")
_lock = threading.Lock()


def install(name: str, layer: Layer | None) -> None:
    """Put (or with None, remove) the layer called ``name``: "otel" or "replay"."""
    global hook
    with _lock:
        if layer is None:
            _layers.pop(name, None)
        else:
            _layers[name] = layer
        found = [_layers[n] for n in _ORDER if n in _layers]
        hook = None if not found else found[0] if len(found) == 1 else _Chain(found)


def installed(name: str) -> Layer | None:
    return _layers.get(name)


# What stands in for telemetry that is off: every run and step event passes through it.
PASS_THROUGH = Layer()


def telemetry() -> Layer:
    """The layer that takes the run and step events: OpenTelemetry's, else ``PASS_THROUGH``."""
    layer = _layers.get("otel")
    return PASS_THROUGH if layer is None else layer.resolved()


@dataclass(frozen=True)
class StepFigures:
    """What one step (a model request and what it asked for) reported. None: the framework
    gave no figure, and the attribute stays unset rather than a wrong zero."""

    stop_reason: str | None = None  # tool_call | end | token_limit | refusal
    model: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None
    finish_reason: str | None = None  # the provider's own word, as the framework passed it on


class Step:
    """One step's span; ``finish`` before the block ends. A no-op when nothing records."""

    def finish(self, figures: StepFigures) -> None:
        """Put what the model reported on the step's span."""

    def __enter__(self) -> Step:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


_NO_STEP = Step()


# -- what one action did ----------------------------------------------------------------------


@dataclass
class Watch:
    """Filled in while one action runs: did the tool run, which attempt, for how long."""

    executed: bool = False
    returned: bool = False
    attempt: int | None = None
    tool_seconds: float | None = None

    def wrap(self, call: Callable[[], T]) -> Callable[[], T]:
        def run() -> T:
            self._enter()
            started = time.perf_counter()
            try:
                result = call()
            finally:
                self.tool_seconds = time.perf_counter() - started
            self.returned = True
            return result

        return run

    def awrap(self, call: Callable[[], Awaitable[T]]) -> Callable[[], Awaitable[T]]:
        async def run() -> T:
            self._enter()
            started = time.perf_counter()
            try:
                result = await call()
            finally:
                self.tool_seconds = time.perf_counter() - started
            self.returned = True
            return result

        return run

    def _enter(self) -> None:
        # The engine sets the effect context just before it calls the tool.
        self.executed = True
        ctx = _effect.get()
        self.attempt = ctx.attempt if ctx is not None else None


def outcome_of(action: Action, watch: Watch, exc: BaseException | None) -> Outcome:
    """Name what happened to one action; see Outcome."""
    if exc is None:
        return "ok" if watch.executed else "deduped"
    if watch.executed and not watch.returned:  # the tool itself raised
        if isinstance(exc, TimeoutError):  # asyncio.TimeoutError is TimeoutError since 3.11
            return "timeout"
        if not is_in_doubt_error(exc, action.options):
            return "error"
        return "timeout" if _caused_by_timeout(exc) else "in_doubt"
    return _engine_outcome(watch, exc)


def _caused_by_timeout(exc: BaseException) -> bool:
    """Whether a TimeoutError is behind this error: a framework's own tool timeout (Pydantic AI's
    ``timeout=``) reaches the ledger as an in-doubt error raised from the TimeoutError."""
    seen: set[int] = set()
    found: BaseException | None = exc
    while found is not None and id(found) not in seen:
        if isinstance(found, TimeoutError):
            return True
        seen.add(id(found))
        found = found.__cause__ or found.__context__
    return False


def _engine_outcome(watch: Watch, exc: BaseException) -> Outcome:
    if isinstance(exc, EffectInDoubt):
        return "in_doubt"
    if isinstance(exc, EffectInProgress):
        return "in_progress"
    if isinstance(exc, ApprovalRequired):
        return "approval_required"
    if isinstance(exc, ApprovalDenied):
        return "denied"
    if isinstance(exc, (ResultNotStored, ResultPruned)):
        # The action is recorded as done: it ran now, or a repeat met the record.
        return "ok" if watch.returned else "deduped"
    return "error"


# How a recorded result is unwrapped to the tool's own value, taught by the integrations (the
# core names no framework). By class path: a function, or "module:function" imported when first
# needed. By shape, for a result recorded as plain JSON: functions that return the tool's value,
# or NOT_AN_ENVELOPE for a result that is not theirs. An integration registers both when it is
# imported; a process that decodes a recorded result without importing it (the CLI) finds them
# through the entry point groups below, read once, on the first result no registration explains.
_ENVELOPES: dict[str, str | Callable[[Any], Any]] = {}
_SHAPES: list[Callable[[Any], Any]] = []
ENVELOPE_GROUP = "call4agents.tool_payloads"  # name: class path; value: "module:function"
SHAPE_GROUP = "call4agents.tool_payload_shapes"  # value: "module:function"
NOT_AN_ENVELOPE: Any = object()
_entry_points_read = False


def register_tool_payload(cls: type, unwrap: Callable[[Any], Any]) -> None:
    """Teach hand-offs and spans to look inside ``cls``, a framework's wrapper of tool results."""
    _ENVELOPES[f"{cls.__module__}.{cls.__qualname__}"] = unwrap


def register_tool_payload_shape(unwrap: Callable[[Any], Any]) -> None:
    """Teach hand-offs and spans a framework's result recorded as plain JSON (see ``_SHAPES``)."""
    if unwrap not in _SHAPES:
        _SHAPES.append(unwrap)


def tool_payload(result: Any) -> Any:
    """The tool's own value inside a framework's envelope, for showing it and finding its ids."""
    kind = type(result)
    unwrap = _ENVELOPES.get(f"{kind.__module__}.{kind.__qualname__}")
    if unwrap is not None:
        return _resolved(kind, unwrap)(result)
    for shape in _SHAPES:
        inner = shape(result)
        if inner is not NOT_AN_ENVELOPE:
            return inner
    if not _entry_points_read and (isinstance(result, Mapping) or kind.__module__ != "builtins"):
        _read_entry_points()
        return tool_payload(result)
    return result


def _read_entry_points() -> None:
    global _entry_points_read
    _entry_points_read = True
    from importlib.metadata import entry_points

    for found in entry_points(group=ENVELOPE_GROUP):
        _ENVELOPES.setdefault(found.name, found.value)
    for found in entry_points(group=SHAPE_GROUP):
        try:
            register_tool_payload_shape(found.load())
        except (ImportError, AttributeError):
            continue  # the integration is not installed here: its results are shown as recorded


def _resolved(kind: type, unwrap: str | Callable[[Any], Any]) -> Callable[[Any], Any]:
    if callable(unwrap):
        return unwrap
    module, _, name = unwrap.partition(":")
    try:
        found: Callable[[Any], Any] = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        found = _as_is  # the integration is not installed here: show the envelope itself
    register_tool_payload(kind, found)
    return found


def _as_is(result: Any) -> Any:
    return result


_ID_FIELDS = ("id", "external_id")


def external_ids(result: Any) -> dict[str, Any]:
    """Ids a tool reported in its result: ``id``, ``external_id`` and ``*_id`` fields of a dict."""
    result = tool_payload(result)
    if not isinstance(result, Mapping):
        return {}
    return {
        str(k): v
        for k, v in result.items()
        if isinstance(k, str)
        and (k in _ID_FIELDS or k.endswith("_id"))
        and isinstance(v, (str, int))
        and not isinstance(v, bool)  # a flag such as {"is_id": true} is not an id
    }


def external_id(result: Any) -> str | None:
    """The id a provider gave what the tool made: of its ``external_ids``, ``id``, else
    ``external_id``."""
    found = external_ids(result)
    return next((str(found[name]) for name in _ID_FIELDS if name in found), None)


def approval_of(action: Action, outcome: Outcome, exc: BaseException | None) -> tuple[str, str]:
    """(ticket, decided_by) of the approval behind this outcome; empty strings when none.

    Reads the ledger, so it is only called for actions that went through an approval.
    """
    if isinstance(exc, ApprovalRequired):
        return str(getattr(exc.request, "ticket", "")), ""
    wanted = {"ok": "spent", "denied": "denied"}.get(outcome)
    if wanted is None or not (action.needs_approval or outcome == "denied"):
        return "", ""
    found = action.ledger.approvals(key=action.key, state=wanted)
    if not found:
        return "", ""
    last = found[-1]
    return last.ticket, last.decided_by or ""
