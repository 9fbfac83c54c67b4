"""OpenTelemetry spans and metrics for every recorded action (imported only when it is installed).

One span per action, ``execute_tool {tool}``, a child of whatever span is current: under a
framework's own tool span when it has one. Attributes follow the GenAI conventions plus ours
(see ``_semconv``); arguments and results only with ``record_args=True``.
"""

from __future__ import annotations

import asyncio
import os
import time
import weakref
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any, TypeVar

from opentelemetry import context, metrics, trace
from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.metrics import _internal as _metrics_api
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from call4agents.engine.context import idempotency_key
from call4agents.engine.observe import (
    _NO_STEP,
    AInner,
    Inner,
    Layer,
    Outcome,
    Step,
    StepFigures,
    Watch,
    approval_of,
    external_id,
    outcome_of,
)
from call4agents.engine.run_notes import COMPLETED, ERROR
from call4agents.model import _semconv as sc
from call4agents.model.errors import LedgerError
from call4agents.storage._db import DatabaseFault

if TYPE_CHECKING:
    from call4agents.engine.action import Action
    from call4agents.engine.ledger_core import LedgerCore
    from call4agents.engine.run_notes import RunSummary


T = TypeVar("T")

# Providers named in the environment are made by the API's getters on first use: never silent.
_PROVIDERS_FROM_ENV = any(
    os.environ.get(name) for name in ("OTEL_PYTHON_TRACER_PROVIDER", "OTEL_PYTHON_METER_PROVIDER")
)

# Buckets for cost per run (in the budget's currency) and tool calls per run: the upper
# percentiles are what an alert watches, so the tail needs resolution.
_COST_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 100.0)
_CALL_BUCKETS = (0, 1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144)

# Outcomes that are a pause or an answer rather than a failure of the operation.
_NOT_ERRORS = frozenset({"ok", "deduped", "approval_required"})


class OtelLayer(Layer):
    """Spans and metrics around each action; built by ``telemetry.configure``."""

    def __init__(self, record_args: bool, tracer_provider: Any, meter_provider: Any) -> None:
        self.record_args = record_args
        self.providers = (tracer_provider, meter_provider)
        self.tracer = trace.get_tracer(sc.INSTRUMENTATION_SCOPE, sc.VERSION, tracer_provider)
        meter = metrics.get_meter(sc.INSTRUMENTATION_SCOPE, sc.VERSION, meter_provider)
        self.actions = meter.create_counter(
            sc.METRIC_ACTIONS, unit="{action}", description="Actions by tool and outcome"
        )
        self.irreversible = meter.create_counter(
            sc.METRIC_IRREVERSIBLE,
            unit="{execution}",
            description="Executions of tools declared irreversible",
        )
        self.runs_ended = meter.create_counter(
            sc.METRIC_RUNS_ENDED,
            unit="{run}",
            description="Runs ended by a run control, by terminal reason",
        )
        self.duration = meter.create_histogram(
            sc.METRIC_DURATION, unit="s", description="Time of one action, ledger work included"
        )
        self.unapproved = meter.create_counter(
            sc.METRIC_UNAPPROVED,
            unit="{execution}",
            description="Approval-required tools that ran with no spent yes in the ledger",
        )
        # Ledgers actions ran against, read by the gauges; weak so a closed ledger can go.
        self.ledgers: weakref.WeakSet[LedgerCore] = weakref.WeakSet()
        self._run_instruments(meter)
        for name in _GAUGED:
            self._gauge(meter, name)

    def _run_instruments(self, meter: metrics.Meter) -> None:
        self.without_read = meter.create_counter(
            sc.METRIC_RUNS_WITHOUT_READ,
            unit="{run}",
            description="Runs that completed without ever calling a read tool",
        )
        self.run_cost = meter.create_histogram(
            sc.METRIC_RUN_COST,
            unit="{cost}",
            description="Cost a run had spent when it left, from its budget's counters",
            explicit_bucket_boundaries_advisory=_COST_BUCKETS,
        )
        self.run_tool_calls = meter.create_histogram(
            sc.METRIC_RUN_TOOL_CALLS,
            unit="{call}",
            description="Tool calls made in one entry of a run",
            explicit_bucket_boundaries_advisory=_CALL_BUCKETS,
        )
        self.run_duration = meter.create_histogram(
            sc.METRIC_RUN_DURATION, unit="s", description="Wall-clock time of one entry of a run"
        )

    def run_left(self, summary: RunSummary) -> None:
        if self.silent():
            return
        reason = summary.terminal_reason
        if reason in (COMPLETED, ERROR):  # run controls count their endings as they record them
            self.runs_ended.add(1, {sc.RUN_TERMINAL_REASON: reason})
        if summary.without_read:
            self.without_read.add(1)
        if summary.cost_spent is not None:
            self.run_cost.record(summary.cost_spent)
        self.run_tool_calls.record(summary.tool_calls)
        self.run_duration.record(summary.wall_clock_ms / 1000.0)
        span = trace.get_current_span()
        if span.is_recording():
            span.set_attributes(_run_attributes(summary))

    def run_ended(self, run_id: str, reason: str, *, count: bool = True) -> None:
        span = trace.get_current_span()
        if span.is_recording():
            span.set_attribute(sc.RUN_ID, run_id)
            span.set_attribute(sc.RUN_TERMINAL_REASON, reason)
        if count:  # the moment the ending was recorded
            self.runs_ended.add(1, {sc.RUN_TERMINAL_REASON: reason})
            attributes = {sc.RUN_ID: run_id, sc.RUN_TERMINAL_REASON: reason}
            span.add_event(sc.EVENT_RUN_ENDED, attributes)

    def run_entered(self, run_id: str, trigger: str) -> None:
        span = trace.get_current_span()
        if span.is_recording():
            span.set_attributes({sc.RUN_ID: run_id, sc.RUN_TRIGGER: trigger})

    def step(self, run_id: str | None, index: int | None, span: object = None) -> Step:
        if self.silent():
            return _NO_STEP
        if isinstance(span, Span) and span.is_recording():
            # An instrumentation's span of the step (OpenInference's span of LangGraph's model
            # node): the whole step goes on it, its LLM span below keeps the model call.
            return _StepSpan(None, run_id, index, span=span, figures=True)
        current = trace.get_current_span()
        if current.is_recording() and _is_model_span(current):
            # The framework's own span of this model request (Pydantic AI's `chat <model>`
            # runs around its capabilities): the step's figures go on it, no second span.
            return _StepSpan(None, run_id, index, span=current)
        return _StepSpan(self.tracer, run_id, index)

    # -- spans -------------------------------------------------------------------------------

    def silent(self) -> bool:
        """True while nothing would receive a span or a measurement: no provider was given and
        no global one is set up (no SDK yet). Actions then skip the layer, which costs a few
        microseconds even when every span is a no-op. Read from the API's own globals, since
        its getters consult the environment on every call."""
        if self.providers != (None, None) or _PROVIDERS_FROM_ENV:
            return False
        return (
            getattr(trace, "_TRACER_PROVIDER", True) is None
            and getattr(_metrics_api, "_METER_PROVIDER", True) is None
        )

    def perform(self, action: Action, call: Callable[[], T], inner: Inner[T]) -> T:
        if self.silent():
            return inner(action, call)
        self.ledgers.add(action.ledger)
        watch = Watch()
        span, token = self._start(action)
        started = time.perf_counter()
        try:
            result = inner(action, watch.wrap(call))
        except BaseException as exc:
            _leave(token)
            outcome = outcome_of(action, watch, exc)
            approval = _approval(action, outcome, exc)
            self._finish(span, action, watch, outcome, approval, started, exc=exc)
            raise
        _leave(token)
        outcome = outcome_of(action, watch, None)
        approval = _approval(action, outcome, None)
        self._finish(span, action, watch, outcome, approval, started, result=result)
        return result

    async def aperform(
        self, action: Action, call: Callable[[], Awaitable[T]], inner: AInner[T]
    ) -> T:
        if self.silent():
            return await inner(action, call)
        self.ledgers.add(action.ledger)
        watch = Watch()
        span, token = self._start(action)
        started = time.perf_counter()
        try:
            result = await inner(action, watch.awrap(call))
        except BaseException as exc:
            _leave(token)
            outcome = outcome_of(action, watch, exc)
            approval = await _aapproval(action, outcome, exc)
            self._finish(span, action, watch, outcome, approval, started, exc=exc)
            raise
        _leave(token)
        outcome = outcome_of(action, watch, None)
        approval = await _aapproval(action, outcome, None)
        self._finish(span, action, watch, outcome, approval, started, result=result)
        return result

    def _start(self, action: Action) -> tuple[Span, object | None]:
        """Start the span, a child of the current one; make it current only if it records.

        A span that records nothing (no SDK installed, or sampled out) is not made current:
        spans the tool makes then parent to the same place it would have, and the context
        switch, most of the cost of a no-op span, is skipped.
        """
        attributes: dict[str, Any] = {
            sc.GEN_AI_OPERATION_NAME: sc.OPERATION_EXECUTE_TOOL,
            sc.GEN_AI_TOOL_NAME: action.tool,
            sc.GEN_AI_TOOL_TYPE: "function",
            sc.RUN_ID: action.run_id,
            sc.SIDE_EFFECT: action.options.kind,
            sc.ACTION_KEY: action.key,
            sc.IDEMPOTENCY_KEY: idempotency_key(action.key),
        }
        if action.call_id:
            attributes[sc.GEN_AI_TOOL_CALL_ID] = action.call_id
        if self.record_args:
            attributes[sc.GEN_AI_TOOL_CALL_ARGUMENTS] = action.args_display
        span = self.tracer.start_span(
            sc.span_name(action.tool), kind=SpanKind.INTERNAL, attributes=attributes
        )
        if not span.is_recording():
            return span, None
        return span, context.attach(trace.set_span_in_context(span))

    def _finish(
        self,
        span: Span,
        action: Action,
        watch: Watch,
        outcome: Outcome,
        approval: tuple[str, str] | None,
        started: float,
        *,
        result: Any = None,
        exc: BaseException | None = None,
    ) -> None:
        elapsed = time.perf_counter() - started
        tool = {sc.GEN_AI_TOOL_NAME: action.tool, sc.OUTCOME: outcome}
        self.actions.add(1, {**tool, sc.SIDE_EFFECT: action.options.kind})
        self.duration.record(elapsed, tool)
        if watch.executed and action.options.kind == "irreversible":
            self.irreversible.add(1, {sc.GEN_AI_TOOL_NAME: action.tool})
        if watch.executed and action.needs_approval and approval == ("", ""):
            self.unapproved.add(1, {sc.GEN_AI_TOOL_NAME: action.tool})
        approval = approval or ("", "")
        if not span.is_recording():
            span.end()
            return
        # Exceptions are described by attributes only: the usual exception event would copy
        # the message, which may quote arguments, onto the span.
        span.set_attributes(_attributes(action, watch, outcome, approval, result, exc))
        if self.record_args and exc is None and outcome in ("ok", "deduped"):
            span.set_attribute(sc.GEN_AI_TOOL_CALL_RESULT, _result_text(action, result))
        if exc is not None and outcome not in _NOT_ERRORS:
            span.set_status(Status(StatusCode.ERROR, outcome))
        span.end()

    # -- gauges reading the ledgers --------------------------------------------------------

    def _gauge(self, meter: metrics.Meter, name: str) -> None:
        """A gauge of one figure of ``stats.OpenFigures`` (see ``_GAUGED``), per ledger that
        actions ran against; an age reads 0 while nothing is open."""
        figure, unit, description = _GAUGED[name]

        def observe(options: CallbackOptions) -> Iterable[Observation]:
            from .stats import open_figures

            for ledger in list(self.ledgers):
                try:
                    value = getattr(open_figures(ledger), figure)
                except (LedgerError, DatabaseFault):
                    continue  # a ledger that cannot be read now reports nothing, not a wrong zero
                yield Observation(0.0 if value is None else value, {sc.LEDGER: ledger.url})

        meter.create_observable_gauge(name, [observe], unit=unit, description=description)


# The gauges reading the ledgers: each one's figure of ``stats.OpenFigures``, unit, description.
_GAUGED = {
    sc.METRIC_IN_DOUBT_OPEN: (
        "in_doubt",
        "{action}",
        "Actions in doubt now, waiting for a person or a reconciler",
    ),
    sc.METRIC_APPROVALS_WAITING: (
        "approvals_waiting",
        "{ticket}",
        "Approval tickets waiting for a person",
    ),
    sc.METRIC_APPROVALS_OLDEST_AGE: (
        "approvals_oldest_age",
        "s",
        "Age of the oldest approval ticket still waiting",
    ),
    sc.METRIC_ESCALATIONS_OPEN: (
        "escalations_open",
        "{run}",
        "Escalated runs nobody has picked up yet",
    ),
    sc.METRIC_ESCALATIONS_OLDEST_AGE: (
        "escalations_oldest_age",
        "s",
        "Age of the oldest escalation nobody has picked up yet",
    ),
}


class _StepSpan(Step):
    """``call4agents.step``: current while open, so the framework's model span is its child."""

    def __init__(
        self,
        tracer: trace.Tracer | None,
        run_id: str | None,
        index: int | None,
        *,
        span: Span | None = None,
        figures: bool = False,
    ) -> None:
        attributes: dict[str, Any] = {}
        if run_id is not None:
            attributes[sc.RUN_ID] = run_id
        if index is not None:
            attributes[sc.STEP_INDEX] = index
        self.own = span is None  # False: the framework's span, which it ends itself
        # Model and tokens too: on our span, or on a given span that has no figures of its own.
        self.figures = self.own or figures
        if span is None:
            assert tracer is not None
            span = tracer.start_span(sc.STEP_SPAN, kind=SpanKind.INTERNAL, attributes=attributes)
        else:
            span.set_attributes(attributes)
        self.span = span
        self.token: object | None = None

    def __enter__(self) -> Step:
        if self.own and self.span.is_recording():
            self.token = context.attach(trace.set_span_in_context(self.span))
        return self

    def __exit__(self, *exc: object) -> None:
        _leave(self.token)
        if not self.own:
            return
        error = exc[1] if len(exc) > 1 else None
        if isinstance(error, BaseException):
            self.span.set_attribute(sc.ERROR_TYPE, type(error).__qualname__)
        self.span.end()

    def finish(self, figures: StepFigures) -> None:
        if not self.span.is_recording():
            return
        found = {
            sc.STEP_STOP_REASON: figures.stop_reason,
            sc.GEN_AI_RESPONSE_MODEL: figures.model,
            sc.GEN_AI_INPUT_TOKENS: figures.input_tokens,
            sc.GEN_AI_OUTPUT_TOKENS: figures.output_tokens,
            sc.GEN_AI_CACHE_READ_TOKENS: figures.cache_read_tokens,
            sc.GEN_AI_CACHE_WRITE_TOKENS: figures.cache_write_tokens,
        }
        if not self.figures:  # the framework's span has its own model, tokens, finish reasons
            found = {sc.STEP_STOP_REASON: figures.stop_reason}
        self.span.set_attributes({k: v for k, v in found.items() if v is not None})
        if self.figures and figures.finish_reason is not None:
            self.span.set_attribute(sc.GEN_AI_RESPONSE_FINISH_REASONS, [figures.finish_reason])


# GenAI span names of one model call: "{operation} {model}".
_MODEL_OPERATIONS = ("chat ", "text_completion ", "generate_content ")


def _is_model_span(span: Span) -> bool:
    name = getattr(span, "name", "")  # the SDK's spans have a name; others are never merged
    return isinstance(name, str) and name.startswith(_MODEL_OPERATIONS)


def _run_attributes(summary: RunSummary) -> dict[str, Any]:
    found: dict[str, Any] = {
        sc.RUN_ID: summary.run_id,
        sc.RUN_TOOL_CALLS: summary.tool_calls,
        sc.BUDGET_WALL_CLOCK_MS: summary.wall_clock_ms,
    }
    if summary.trigger is not None:
        found[sc.RUN_TRIGGER] = summary.trigger
    if summary.terminal_reason is not None:
        found[sc.RUN_TERMINAL_REASON] = summary.terminal_reason
    if summary.without_read is not None:
        found[sc.RUN_WITHOUT_READ] = summary.without_read
    if summary.cost_spent is not None:
        found[sc.BUDGET_COST_SPENT] = summary.cost_spent
    if summary.escalation_reason is not None:
        found[sc.ESCALATION_REASON] = summary.escalation_reason
    return found


def _leave(token: object | None) -> None:
    if token is not None:
        context.detach(token)  # type: ignore[arg-type]


def _attributes(
    action: Action,
    watch: Watch,
    outcome: Outcome,
    approval: tuple[str, str],
    result: Any,
    exc: BaseException | None,
) -> dict[str, Any]:
    found: dict[str, Any] = {sc.OUTCOME: outcome}
    attempt = watch.attempt if watch.attempt is not None else getattr(exc, "attempt", None)
    if isinstance(attempt, int):
        found[sc.ATTEMPT] = attempt
    if watch.tool_seconds is not None:
        found[sc.TOOL_DURATION] = watch.tool_seconds
    if exc is None and (ext := external_id(result)) is not None:
        found[sc.EXTERNAL_ID] = ext
    if exc is not None:
        found[sc.ERROR_TYPE] = type(exc).__qualname__
    ticket, decided_by = approval
    if ticket:
        found[sc.APPROVAL_TICKET] = ticket
    if decided_by:
        found[sc.APPROVAL_DECIDED_BY] = decided_by
    return found


def _result_text(action: Action, result: Any) -> str:
    from call4agents.model.codec import ResultEncodingError, encode_result

    try:
        return encode_result(result, max_bytes=action.ledger.max_result_bytes)
    except ResultEncodingError:
        return repr(result)[:2000]


def _approval(
    action: Action, outcome: Outcome, exc: BaseException | None
) -> tuple[str, str] | None:
    """(ticket, decided_by); None when the ledger could not say (never counted as unapproved)."""
    if not _asks_ledger(action, outcome, exc):
        return "", ""
    try:
        return approval_of(action, outcome, exc)
    except Exception:  # noqa: BLE001 - telemetry must never turn an outcome into another error
        return None


async def _aapproval(
    action: Action, outcome: Outcome, exc: BaseException | None
) -> tuple[str, str] | None:
    if not _asks_ledger(action, outcome, exc):
        return "", ""
    try:
        return await asyncio.to_thread(approval_of, action, outcome, exc)
    except Exception:  # noqa: BLE001 - as in _approval
        return None


def _asks_ledger(action: Action, outcome: Outcome, exc: BaseException | None) -> bool:
    if outcome == "approval_required":
        return True
    return outcome == "denied" or (outcome == "ok" and action.needs_approval)
