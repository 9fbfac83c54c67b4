"""One ``call4agents.step`` span per model request of a real Agents SDK run (the SDK's own
scripted model, offline), under the span around ``Runner.run``."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from agents import (
    Agent,
    Model,
    ModelProvider,
    RunConfig,
    Runner,
    RunResult,
    RunResultStreaming,
    RunState,
    Usage,
    function_tool,
)
from agents.exceptions import ModelRefusalError
from agents.testing import ModelStep, ScriptedModel
from openai.types.responses import ResponseOutputMessage, ResponseOutputRefusal
from openai.types.responses.response_usage import InputTokensDetails
from opentelemetry.sdk.trace import ReadableSpan

import call4agents as c4a
from call4agents_openai_agents import OnceOnly
from tests.conftest import Target
from tests.openai_agents.support import assistant_message, call
from tests.otel.conftest import Telemetry

RUN = {"call4agents_run_id": "ticket-9"}


class Provider(ModelProvider):
    """Resolves the agent's model name to a scripted model, as a real provider would to its API."""

    def __init__(self, model: ScriptedModel) -> None:
        self.model = model

    def get_model(self, model_name: str | None) -> Model:
        return self.model


@pytest.fixture
def ledger(target: Target) -> c4a.Ledger:
    return c4a.init(target.open())


def usage(given: int, answered: int, *, cached: int = 0, written: int = 0) -> Usage:
    details = InputTokensDetails.model_validate(
        {"cached_tokens": cached, "cache_write_tokens": written}
    )
    return Usage(
        requests=1,
        input_tokens=given,
        output_tokens=answered,
        total_tokens=given + answered,
        input_tokens_details=details,
    )


def agent(once: OnceOnly, model: str | Model) -> Agent[Any]:
    @function_tool
    def send_email(to: str) -> str:
        """Email a customer."""
        return f"sent to {to}"

    @function_tool
    def refund(order: str) -> str:
        """Refund an order."""
        return "refunded"

    return once.wrap(Agent(name="support", model=model, tools=[send_email, refund]))


def steps(telemetry: Telemetry) -> list[ReadableSpan]:
    found = telemetry.spans("call4agents.step")
    return sorted(found, key=lambda s: attrs(s)["call4agents.step.index"])


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


@pytest.mark.parametrize("streamed", [False, True], ids=["run", "streamed"])
def test_one_step_per_model_request_under_the_runs_span(
    ledger: c4a.Ledger, telemetry: Telemetry, streamed: bool
) -> None:
    model = ScriptedModel(
        [
            ModelStep(
                [call("send_email", "c-1", to="bob")], usage(120, 30, cached=100, written=20)
            ),
            ModelStep([assistant_message("sent")], usage(200, 10)),
        ]
    )
    support = agent(OnceOnly(trigger="webhook"), "gpt-test-1")
    config = RunConfig(model_provider=Provider(model))

    async def go() -> RunResult | RunResultStreaming:
        if not streamed:
            return await Runner.run(support, "mail bob", context=dict(RUN), run_config=config)
        result = Runner.run_streamed(support, "mail bob", context=dict(RUN), run_config=config)
        async for _ in result.stream_events():
            pass
        return result

    with telemetry.tracer_provider.get_tracer("app").start_as_current_span("ticket") as ticket:
        asyncio.run(go())

    found = steps(telemetry)
    assert [attrs(s)["call4agents.step.index"] for s in found] == [1, 2]
    assert [attrs(s)["call4agents.step.stop_reason"] for s in found] == ["tool_call", "end"]
    for span in found:
        assert span.parent is not None
        assert span.parent.span_id == ticket.get_span_context().span_id
        assert attrs(span)["call4agents.run.id"] == "ticket-9"
        assert attrs(span)["gen_ai.response.model"] == "gpt-test-1"
    first, second = (attrs(s) for s in found)
    assert (first["gen_ai.usage.input_tokens"], first["gen_ai.usage.output_tokens"]) == (120, 30)
    assert first["gen_ai.usage.cache_read.input_tokens"] == 100
    assert first["gen_ai.usage.cache_creation.input_tokens"] == 20
    assert (second["gen_ai.usage.input_tokens"], second["gen_ai.usage.output_tokens"]) == (200, 10)
    assert "gen_ai.usage.cache_read.input_tokens" not in second  # none reported: unset, not 0
    assert "gen_ai.usage.cache_creation.input_tokens" not in second
    # The tool call between the steps: a sibling under the run's span, in the same trace.
    [tool] = telemetry.ours()
    assert tool.parent is not None
    assert tool.parent.span_id == ticket.get_span_context().span_id
    assert attrs(tool)["gen_ai.tool.call.id"] == "c-1"


def test_a_model_that_reports_no_usage_leaves_the_figures_unset(
    ledger: c4a.Ledger, telemetry: Telemetry
) -> None:
    # The scripted model's default: Usage(requests=1), no tokens; a Model object with no name.
    model = ScriptedModel([[call("send_email", "c-1", to="bob")], [assistant_message("sent")]])
    asyncio.run(Runner.run(agent(OnceOnly(), model), "mail bob", context=dict(RUN)))
    found = steps(telemetry)
    assert [attrs(s)["call4agents.step.stop_reason"] for s in found] == ["tool_call", "end"]
    for span in found:
        for name in (
            "gen_ai.usage.input_tokens",
            "gen_ai.usage.output_tokens",
            "gen_ai.usage.cache_read.input_tokens",
            "gen_ai.usage.cache_creation.input_tokens",
            "gen_ai.response.model",
        ):
            assert name not in attrs(span)


def message(status: str, *content: Any) -> ResponseOutputMessage:
    return ResponseOutputMessage(
        id="m-1", type="message", role="assistant", status=status, content=list(content)
    )


def test_a_refusal_is_the_steps_stop_reason(ledger: c4a.Ledger, telemetry: Telemetry) -> None:
    refusal = ResponseOutputRefusal(type="refusal", refusal="I cannot help with that")
    model = ScriptedModel([[message("completed", refusal)]])
    with pytest.raises(ModelRefusalError):  # the SDK ends the run; the step was answered
        asyncio.run(Runner.run(agent(OnceOnly(), model), "do it", context=dict(RUN)))
    [span] = steps(telemetry)
    assert attrs(span)["call4agents.step.stop_reason"] == "refusal"


def test_the_index_continues_when_a_paused_run_is_resumed(
    ledger: c4a.Ledger, telemetry: Telemetry
) -> None:
    once = OnceOnly(tools={"refund": {"approval": True}})
    model = ScriptedModel([[call("refund", "c-1", order="A-7")], [assistant_message("refunded")]])
    support = agent(once, model)
    paused = asyncio.run(Runner.run(support, "refund A-7", context=dict(RUN)))
    [item] = paused.interruptions
    state: RunState[Any, Any] = paused.to_state()
    once.approve(state, item, by="ann")
    asyncio.run(Runner.run(support, state))
    found = steps(telemetry)
    assert [attrs(s)["call4agents.step.index"] for s in found] == [1, 2]
    assert [attrs(s)["call4agents.step.stop_reason"] for s in found] == ["tool_call", "end"]
