"""Each recorded action as a span of the SDK's own trace, under the tool's function span.

The Agents SDK traces with its own spans (``agents.tracing``), not OpenTelemetry, so the core's
``execute_tool`` OpenTelemetry span cannot nest under the SDK's function span. The SDK's trace
gets a custom span instead, a child of that function span, with the same attribute names as the
OpenTelemetry span (run id, action key, idempotency key, outcome, attempt, the SDK's call id).
Arguments and results are never put on it. With SDK tracing off, nothing is made.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from agents.tracing import Span, SpanError, custom_span, get_current_span
from agents.tracing.span_data import CustomSpanData
from agents.tracing.spans import NoOpSpan

from call4agents.integration import Action, Watch, external_id, idempotency_key, outcome_of
from call4agents.integration import semconv as sc

T = TypeVar("T")

# Outcomes that are a result or a pause, not a failure of the action.
_NOT_ERRORS = frozenset({"ok", "deduped", "approval_required"})


class ActionSpan:
    """The SDK span of one action; ``call`` wraps the tool so the outcome can be told."""

    def __init__(self, action: Action) -> None:
        self.action = action
        self.watch = Watch()
        parent = get_current_span()
        self.span: Span[CustomSpanData] | None = None
        if parent is not None and not isinstance(parent, NoOpSpan):
            self.span = custom_span(sc.span_name(action.tool), data=_data(action))
            # Current while the tool runs: SDK spans the tool makes nest under the action.
            self.span.start(mark_as_current=True)

    def call(self, call: Callable[[], Awaitable[T]]) -> Callable[[], Awaitable[T]]:
        return self.watch.awrap(call)

    def finish(self, result: Any = None, exc: BaseException | None = None) -> None:
        if self.span is None:
            return
        outcome = outcome_of(self.action, self.watch, exc)
        data = self.span.span_data.data
        data[sc.OUTCOME] = outcome
        attempt = self.watch.attempt
        attempt = attempt if attempt is not None else getattr(exc, "attempt", None)
        if isinstance(attempt, int):
            data[sc.ATTEMPT] = attempt
        if exc is None and (found := external_id(result)) is not None:
            data[sc.EXTERNAL_ID] = found
        if exc is not None:
            data[sc.ERROR_TYPE] = type(exc).__qualname__
            if outcome not in _NOT_ERRORS:
                # The outcome only: an exception's text may quote the arguments.
                self.span.set_error(SpanError(message=outcome, data={sc.OUTCOME: outcome}))
        self.span.finish(reset_current=True)


def _data(action: Action) -> dict[str, Any]:
    data: dict[str, Any] = {
        sc.GEN_AI_OPERATION_NAME: sc.OPERATION_EXECUTE_TOOL,
        sc.GEN_AI_TOOL_NAME: action.tool,
        sc.RUN_ID: action.run_id,
        sc.SIDE_EFFECT: action.options.kind,
        sc.ACTION_KEY: action.key,
        sc.IDEMPOTENCY_KEY: idempotency_key(action.key),
    }
    if action.call_id:
        data[sc.GEN_AI_TOOL_CALL_ID] = action.call_id
    return data
