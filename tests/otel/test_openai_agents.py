"""In a real Agents SDK run: each action's OpenTelemetry span, and its span in the SDK's trace.

The SDK traces with its own spans (``agents.tracing``), not OpenTelemetry. Each action therefore
shows twice: the core's ``execute_tool`` OpenTelemetry span, under the caller's current span, and
a custom span in the SDK's trace, under the SDK's function span of that tool call. Both carry the
SDK's tool call id and the same call4agents attributes. The SDK's spans are collected by an
in-memory processor on a provider of the test's own, so nothing leaves the machine.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from agents import Agent, Runner, function_tool
from agents.tracing import (
    Span,
    Trace,
    TracingProcessor,
    get_trace_provider,
    set_trace_provider,
)
from agents.tracing.provider import DefaultTraceProvider
from agents.tracing.span_data import CustomSpanData, FunctionSpanData
from opentelemetry.trace import StatusCode

import call4agents as c4a
from call4agents_openai_agents import OnceOnly
from tests.conftest import Target
from tests.openai_agents.support import assistant_message, call, outputs, script
from tests.otel.conftest import Telemetry

RUN = {"call4agents_run_id": "ticket-7"}


class Collected(TracingProcessor):
    """The SDK's spans, kept in memory as they end."""

    def __init__(self) -> None:
        self.spans: list[Span[Any]] = []

    def on_trace_start(self, trace: Trace) -> None:
        pass

    def on_trace_end(self, trace: Trace) -> None:
        pass

    def on_span_start(self, span: Span[Any]) -> None:
        pass

    def on_span_end(self, span: Span[Any]) -> None:
        self.spans.append(span)

    def shutdown(self) -> None:
        pass

    def force_flush(self) -> None:
        pass

    def ours(self) -> list[Span[CustomSpanData]]:
        return [s for s in self.spans if isinstance(s.span_data, CustomSpanData)]

    def function_spans(self) -> dict[str, Span[FunctionSpanData]]:
        return {s.span_id: s for s in self.spans if isinstance(s.span_data, FunctionSpanData)}


@pytest.fixture
def sdk_trace() -> Iterator[Collected]:
    """SDK tracing on, into memory only; the SDK's own provider and processors come back after."""
    saved = get_trace_provider()
    provider = DefaultTraceProvider()
    collected = Collected()
    provider.set_processors([collected])
    provider.set_disabled(False)
    set_trace_provider(provider)
    try:
        yield collected
    finally:
        set_trace_provider(saved)


@pytest.fixture
def ledger(target: Target) -> c4a.Ledger:
    return c4a.init(target.open())


def tools() -> list[Any]:
    @function_tool
    def send_email(to: str) -> dict[str, str]:
        """Send an email."""
        return {"id": f"msg-{to}", "to": to}

    @function_tool
    def charge(amount: int) -> str:
        """Charge a card."""
        raise ValueError("card declined")  # did not act

    @function_tool
    def wire(to: str) -> str:
        """Wire money."""
        raise c4a.OutcomeUnknown("the bank hung up")

    @function_tool
    def refund(order: str) -> str:
        """Refund an order."""
        return "refunded"

    return [send_email, charge, wire, refund]


def run(once: OnceOnly, *steps: Any) -> None:
    agent = once.wrap(Agent(name="support", model=script(*steps), tools=tools()))
    asyncio.run(Runner.run(agent, "go", context=dict(RUN)))


def attrs(span: Any) -> dict[str, Any]:
    return dict(span.attributes or {})


def test_the_action_nests_under_the_sdk_function_span_and_the_callers_otel_span(
    ledger: c4a.Ledger, telemetry: Telemetry, sdk_trace: Collected
) -> None:
    tracer = telemetry.tracer_provider.get_tracer("support-app")
    with tracer.start_as_current_span("handle ticket") as outer:
        run(OnceOnly(), [call("send_email", "call-1", to="bob")], [assistant_message("sent")])

    [otel] = telemetry.ours()
    a = attrs(otel)
    assert otel.name == "execute_tool send_email"
    assert a["gen_ai.tool.call.id"] == "call-1"
    assert a["call4agents.run.id"] == "ticket-7"
    assert a["call4agents.outcome"] == "ok"
    assert a["call4agents.external_id"] == "msg-bob"
    assert otel.parent is not None
    assert otel.parent.span_id == outer.get_span_context().span_id
    assert otel.context.trace_id == outer.get_span_context().trace_id

    [ours] = sdk_trace.ours()
    function = sdk_trace.function_spans()[str(ours.parent_id)]
    assert function.span_data.name == "send_email"
    assert ours.trace_id == function.trace_id  # the run's own trace
    assert ours.span_data.name == "execute_tool send_email"
    data = ours.span_data.data
    assert data["gen_ai.tool.call.id"] == "call-1"
    assert data["call4agents.run.id"] == "ticket-7"
    assert data["call4agents.outcome"] == "ok"
    assert data["call4agents.attempt"] == 1
    # One action, the same identity in both traces.
    for name in ("call4agents.action.key", "call4agents.idempotency_key", "gen_ai.tool.name"):
        assert data[name] == a[name]
    assert ours.error is None


def test_each_outcome_on_both_spans(
    ledger: c4a.Ledger, telemetry: Telemetry, sdk_trace: Collected
) -> None:
    once = OnceOnly(tools={"refund": {"approval": True}})
    run(
        once,
        [call("send_email", "c-ok", to="bob")],
        [call("send_email", "c-again", to="bob")],  # the same email again: served from the ledger
        [call("charge", "c-error", amount=5)],
        [call("wire", "c-doubt", to="bob")],
        [call("refund", "c-ask", order="A-7")],  # pauses for a person
    )
    [ticket] = ledger.approvals("ticket-7", state="pending")
    ledger.deny(ticket.ticket, by="ann", reason="duplicate claim")
    run(once, [call("refund", "c-denied", order="A-7")], [assistant_message("refused")])

    expected = [
        ("c-ok", "ok"),
        ("c-again", "deduped"),
        ("c-error", "error"),
        ("c-doubt", "in_doubt"),
        ("c-denied", "denied"),
    ]
    otel = [
        (attrs(s)["gen_ai.tool.call.id"], attrs(s)["call4agents.outcome"]) for s in telemetry.ours()
    ]
    assert otel == expected
    sdk = [
        (s.span_data.data["gen_ai.tool.call.id"], s.span_data.data["call4agents.outcome"])
        for s in sdk_trace.ours()
    ]
    assert sdk == expected
    denied = telemetry.ours()[-1]
    assert attrs(denied)["call4agents.approval.decided_by"] == "ann"
    assert denied.status.status_code == StatusCode.ERROR
    # Failures are marked on the SDK's spans too, by outcome only (no argument text).
    errors = {s.span_data.data["call4agents.outcome"]: s.error for s in sdk_trace.ours()}
    assert errors["ok"] is None
    assert errors["deduped"] is None
    for outcome in ("error", "in_doubt", "denied"):
        found = errors[outcome]
        assert found is not None
        assert found["message"] == outcome
    functions = sdk_trace.function_spans()
    assert all(str(s.parent_id) in functions for s in sdk_trace.ours())


def test_with_sdk_tracing_off_the_otel_span_stays(
    ledger: c4a.Ledger, telemetry: Telemetry, sdk_trace: Collected
) -> None:
    get_trace_provider().set_disabled(True)
    run(OnceOnly(), [call("send_email", "call-1", to="bob")], [assistant_message("sent")])
    assert sdk_trace.spans == []
    [otel] = telemetry.ours()
    assert attrs(otel)["gen_ai.tool.call.id"] == "call-1"


NO_ARGS = ("gen_ai.tool.call.arguments", "gen_ai.tool.call.result")


def test_in_progress_while_another_worker_runs_the_call(
    ledger: c4a.Ledger, telemetry: Telemetry, sdk_trace: Collected
) -> None:
    """Two workers on one run: the second meets the first's call still running."""

    async def main() -> list[str]:
        inside, release = asyncio.Event(), asyncio.Event()

        def worker(wait: float) -> Agent[Any]:
            # A tool of each worker's own, as in two processes: wrapping the same tool object
            # again keeps its first wrap's options (the first worker's wait).
            @function_tool
            async def send_email(to: str) -> str:
                """Send an email."""
                inside.set()
                await release.wait()
                return f"sent to {to}"

            model = script([call("send_email", "call-1", to="bob")], [assistant_message("ok")])
            once = OnceOnly(default=c4a.EffectOptions(wait=wait))
            return once.wrap(Agent(name="support", model=model, tools=[send_email]))

        first = asyncio.create_task(Runner.run(worker(30), "go", context=dict(RUN)))
        await asyncio.wait_for(inside.wait(), 30)
        busy = await Runner.run(worker(0), "go", context=dict(RUN))
        release.set()
        await first
        return outputs(busy)

    [told] = asyncio.run(main())
    assert "still running in another worker" in told
    by_outcome = {attrs(s)["call4agents.outcome"]: s for s in telemetry.ours()}
    assert sorted(by_outcome) == ["in_progress", "ok"]
    busy = attrs(by_outcome["in_progress"])
    assert busy["gen_ai.tool.call.id"] == "call-1"
    assert busy["error.type"] == "EffectInProgress"
    assert by_outcome["in_progress"].status.status_code == StatusCode.ERROR
    sdk = sorted(s.span_data.data["call4agents.outcome"] for s in sdk_trace.ours())
    assert sdk == ["in_progress", "ok"]


def test_timeout_of_the_tools_client_with_its_latency(
    ledger: c4a.Ledger, telemetry: Telemetry, sdk_trace: Collected
) -> None:
    @function_tool
    async def wire(to: str) -> str:
        """Wire money."""
        await asyncio.sleep(0.05)
        raise TimeoutError("the bank did not answer")

    agent = OnceOnly().wrap(
        Agent(
            name="support",
            model=script([call("wire", "c-1", to="bob")], [assistant_message("ok")]),
            tools=[wire],
        )
    )
    result = asyncio.run(Runner.run(agent, "go", context=dict(RUN)))
    assert "may or may not have run" in outputs(result)[0]
    [span] = telemetry.ours()
    a = attrs(span)
    assert a["call4agents.outcome"] == "timeout"
    assert a["error.type"] == "TimeoutError"
    assert span.status.status_code == StatusCode.ERROR
    assert 0.05 <= a["call4agents.tool.duration"] < 30
    [latency] = telemetry.points("call4agents.action.duration")
    assert latency.sum >= a["call4agents.tool.duration"]
    [ours] = sdk_trace.ours()
    assert ours.span_data.data["call4agents.outcome"] == "timeout"


def test_the_sdks_own_timeout_cancels_the_tool_in_doubt(
    ledger: c4a.Ledger, telemetry: Telemetry
) -> None:
    """The SDK's ``timeout=`` cancels the tool's task: the span can only see the cancellation."""
    started: list[str] = []

    # Long enough for the claim to be written first on a busy machine (cancelled before it, the
    # tool never ran, and the action is rightly a plain failure, not in doubt).
    @function_tool(timeout=1.0)
    async def wire(to: str) -> str:
        """Wire money."""
        started.append(to)
        await asyncio.sleep(30)
        return "sent"

    agent = OnceOnly().wrap(
        Agent(
            name="support",
            model=script([call("wire", "c-1", to="bob")], [assistant_message("ok")]),
            tools=[wire],
        )
    )
    result = asyncio.run(Runner.run(agent, "go", context=dict(RUN)))
    assert outputs(result) == ["Tool 'wire' timed out after 1 seconds."]  # the SDK's own text
    assert started == ["bob"]
    [span] = telemetry.ours()
    assert attrs(span)["call4agents.outcome"] == "in_doubt"
    assert attrs(span)["error.type"] == "CancelledError"
    [doubt] = ledger.in_doubt()
    assert doubt.tool == "wire"


@pytest.mark.parametrize("ending", ["escalated", "step_limit"])
def test_the_callers_span_carries_the_runs_ending(
    ledger: c4a.Ledger, telemetry: Telemetry, ending: str
) -> None:
    budget = c4a.Budget(max_tool_calls=1) if ending == "step_limit" else None

    @function_tool
    def escalate(reason: str) -> str:
        """Hand the case to a person."""
        c4a.escalate(reason)

    agent = OnceOnly(budget=budget).wrap(
        Agent(
            name="support",
            model=script(
                [call("send_email", "c-1", to="bob")],
                [call("escalate", "c-2", reason="refunds need a person")],
                [assistant_message("ok")],
            ),
            tools=[*tools(), escalate],
        )
    )
    tracer = telemetry.tracer_provider.get_tracer("support-app")
    expected = c4a.Escalated if ending == "escalated" else c4a.BudgetExceeded
    with pytest.raises(expected), tracer.start_as_current_span("handle ticket"):
        asyncio.run(Runner.run(agent, "go", context=dict(RUN)))
    [job] = [s for s in telemetry.exporter.get_finished_spans() if s.name == "handle ticket"]
    assert attrs(job)["call4agents.run.terminal_reason"] == ending
    assert attrs(job)["call4agents.run.id"] == "ticket-7"
    [ended] = telemetry.points("call4agents.runs.ended")
    assert dict(ended.attributes) == {"call4agents.run.terminal_reason": ending}
    assert ended.value == 1


def test_no_arguments_or_results_on_either_span_by_default(
    ledger: c4a.Ledger, telemetry: Telemetry, sdk_trace: Collected
) -> None:
    run(OnceOnly(), [call("send_email", "call-1", to="bob")], [assistant_message("sent")])
    [otel] = telemetry.ours()
    [ours] = sdk_trace.ours()
    assert attrs(otel)["call4agents.outcome"] == "ok"
    for found in (attrs(otel), ours.span_data.data):
        assert not set(NO_ARGS) & set(found)
        assert "'to': 'bob'" not in repr(found)


def test_arguments_and_results_when_opted_in(
    ledger: c4a.Ledger, telemetry_with_args: Telemetry
) -> None:
    run(OnceOnly(), [call("send_email", "call-1", to="bob")], [assistant_message("sent")])
    [otel] = telemetry_with_args.ours()
    assert attrs(otel)["gen_ai.tool.call.arguments"] == '{"to":"bob"}'
    assert attrs(otel)["gen_ai.tool.call.result"] == '{"id":"msg-bob","to":"bob"}'


def test_the_run_completes_with_its_trigger_and_without_a_read(
    ledger: c4a.Ledger, telemetry: Telemetry, sdk_trace: Collected
) -> None:
    tracer = telemetry.tracer_provider.get_tracer("support-app")
    with tracer.start_as_current_span("handle ticket"):
        run(
            OnceOnly(trigger="schedule"),
            [call("send_email", "call-1", to="bob")],
            [assistant_message("sent")],
        )
    [outer] = telemetry.spans("handle ticket")
    a = attrs(outer)
    assert a["call4agents.run.trigger"] == "schedule"
    assert a["call4agents.run.terminal_reason"] == "completed"
    assert a["call4agents.run.without_read"] is True  # it sent without looking anything up
    assert a["call4agents.run.tool_calls"] == 1
    with pytest.raises(c4a.ConfigurationError, match="OnceOnly\\(trigger='later'\\)"):
        OnceOnly(trigger="later")  # type: ignore[arg-type]
