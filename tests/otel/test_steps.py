"""One ``call4agents.step`` span per turn of the agent loop, nested with the framework's own."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from opentelemetry.sdk.trace import ReadableSpan
from pydantic_ai import Agent
from pydantic_ai.models.instrumented import InstrumentationSettings
from pydantic_ai.models.test import TestModel

import call4agents as c4a
from call4agents_langgraph import OnceOnly as OnceOnlyLG
from call4agents_pydantic_ai import OnceOnly
from tests.conftest import Target
from tests.langgraph.fake_model import StepModel
from tests.langgraph.helpers import Outbox as LgOutbox
from tests.otel.conftest import Telemetry
from tests.pydantic_ai.scripted import Outbox

LG_CONFIG: Any = {"configurable": {"thread_id": "thread-steps"}}


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def test_pydantic_ai_steps_nest_the_frameworks_model_spans(
    target: Target, telemetry: Telemetry, tmp_path: Path
) -> None:
    outbox = Outbox(tmp_path / "outbox.jsonl")
    agent: Agent[None, str] = Agent(
        TestModel(call_tools=["send_email"]),
        capabilities=[OnceOnly(ledger=target.open(), trigger="webhook")],
    )
    agent.instrument = InstrumentationSettings(tracer_provider=telemetry.tracer_provider)

    @agent.tool_plain
    def send_email(to: str, body: str) -> str:
        """Email a customer."""
        return outbox.send(to, body)

    agent.run_sync("Tell Bob", conversation_id="conv-steps")
    spans = telemetry.exporter.get_finished_spans()
    # Pydantic AI's own `chat` span of each request is the step: it carries the step's index
    # and stop reason beside its own model and token figures; no second span duplicates it.
    assert telemetry.spans("call4agents.step") == []
    chats = sorted(telemetry.spans("chat"), key=lambda s: attrs(s)["call4agents.step.index"])
    assert [attrs(s)["call4agents.step.index"] for s in chats] == [1, 2]
    assert [attrs(s)["call4agents.step.stop_reason"] for s in chats] == ["tool_call", "end"]
    for chat in chats:
        assert attrs(chat)["call4agents.run.id"] == "conv-steps"
        assert attrs(chat)["gen_ai.usage.input_tokens"] > 0
    # Our tool span sits under Pydantic AI's, in the same trace as the steps.
    [tool] = telemetry.ours()
    assert tool.context.trace_id == chats[0].context.trace_id
    [run] = [s for s in spans if "call4agents.run.trigger" in attrs(s)]
    assert attrs(run)["call4agents.run.trigger"] == "webhook"
    assert attrs(run)["call4agents.run.terminal_reason"] == "completed"


def test_pydantic_ai_steps_without_instrumentation(
    target: Target, telemetry: Telemetry, tmp_path: Path
) -> None:
    outbox = Outbox(tmp_path / "outbox.jsonl")
    agent: Agent[None, str] = Agent(
        TestModel(call_tools=["send_email"]), capabilities=[OnceOnly(ledger=target.open())]
    )

    @agent.tool_plain
    def send_email(to: str, body: str) -> str:
        """Email a customer."""
        return outbox.send(to, body)

    tracer = telemetry.tracer_provider.get_tracer("app")
    with tracer.start_as_current_span("job"):
        agent.run_sync("Tell Bob", conversation_id="conv-plain")
    steps = sorted(
        telemetry.spans("call4agents.step"), key=lambda s: attrs(s)["call4agents.step.index"]
    )
    assert [attrs(s)["call4agents.step.stop_reason"] for s in steps] == ["tool_call", "end"]
    [job] = telemetry.spans("job")
    for step in steps:
        assert step.parent is not None
        assert step.parent.span_id == job.context.span_id
        assert attrs(step)["gen_ai.response.model"] == "test"
        assert attrs(step)["gen_ai.usage.input_tokens"] > 0
        assert attrs(step)["gen_ai.usage.output_tokens"] > 0
        assert "gen_ai.usage.cache_read.input_tokens" not in attrs(step)  # none reported


def _graph(target: Target, outbox: LgOutbox, usage: tuple[int, int] | None) -> Any:
    @tool
    def lookup(order: str) -> str:
        """Look an order up."""
        return f"order {order}: paid"

    @tool
    def send_email(to: str, body: str) -> str:
        """Email a customer."""
        outbox.send(to, body)
        return f"sent to {to}"

    model = StepModel(
        calls=[("lookup", {"order": "o-1"}), ("send_email", {"to": "bob", "body": "hi"})],
        usage=usage,
    )
    return create_agent(
        model,
        [lookup, send_email],
        middleware=[
            OnceOnlyLG(ledger=target.open(), tools={"lookup": {"kind": "read"}}, trigger="user")
        ],
        checkpointer=InMemorySaver(),
    )


def test_langgraph_one_step_per_model_call(
    target: Target, telemetry: Telemetry, tmp_path: Path
) -> None:
    graph = _graph(target, LgOutbox(tmp_path / "outbox.jsonl"), usage=(120, 30))
    tracer = telemetry.tracer_provider.get_tracer("app")
    with tracer.start_as_current_span("ticket"):
        graph.invoke({"messages": [HumanMessage("mail bob")]}, LG_CONFIG)
    steps = telemetry.spans("call4agents.step")
    assert [attrs(s)["call4agents.step.index"] for s in steps] == [1, 2, 3]
    assert [attrs(s)["call4agents.step.stop_reason"] for s in steps] == [
        "tool_call",
        "tool_call",
        "end",
    ]
    assert {attrs(s)["gen_ai.usage.input_tokens"] for s in steps} == {120}
    assert {attrs(s)["gen_ai.usage.output_tokens"] for s in steps} == {30}
    [ticket] = telemetry.spans("ticket")
    assert {s.context.trace_id for s in steps} == {ticket.context.trace_id}
    # The final answer ends the run: completed, with a read behind it, and its trigger.
    [run] = [
        s for s in telemetry.exporter.get_finished_spans() if "call4agents.run.trigger" in attrs(s)
    ]
    assert attrs(run)["call4agents.run.trigger"] == "user"
    assert attrs(run)["call4agents.run.terminal_reason"] == "completed"
    assert attrs(run)["call4agents.run.without_read"] is False
    assert attrs(run)["call4agents.run.tool_calls"] == 2


def test_langgraph_tokens_stay_unset_when_the_model_reports_none(
    target: Target, telemetry: Telemetry, tmp_path: Path
) -> None:
    graph = _graph(target, LgOutbox(tmp_path / "outbox.jsonl"), usage=None)
    graph.invoke({"messages": [HumanMessage("mail bob")]}, LG_CONFIG)
    steps = telemetry.spans("call4agents.step")
    assert len(steps) == 3
    for step in steps:
        assert "gen_ai.usage.input_tokens" not in attrs(step)
        assert "gen_ai.usage.output_tokens" not in attrs(step)
        assert attrs(step)["call4agents.step.stop_reason"] in ("tool_call", "end")


def test_langgraph_inside_the_callers_run_block_is_ended_by_that_block(
    target: Target, telemetry: Telemetry, tmp_path: Path
) -> None:
    graph = _graph(target, LgOutbox(tmp_path / "outbox.jsonl"), usage=None)
    tracer = telemetry.tracer_provider.get_tracer("app")
    with tracer.start_as_current_span("job"), c4a.run("thread-steps", trigger="schedule"):
        graph.invoke({"messages": [HumanMessage("mail bob")]}, LG_CONFIG)
        graph.invoke({"messages": [HumanMessage("mail bob again")]}, LG_CONFIG)
    # One run: the caller's block, not each graph's final answer, ends it.
    ended = telemetry.points("call4agents.runs.ended")
    assert sum(p.value for p in ended) == 1
    [job] = telemetry.spans("job")
    assert attrs(job)["call4agents.run.trigger"] == "schedule"
    assert attrs(job)["call4agents.run.tool_calls"] == 2


def test_langgraph_escalation_ends_the_run_its_steps_opened(
    target: Target, telemetry: Telemetry, tmp_path: Path
) -> None:
    @tool
    def refund(amount: int) -> str:
        """Refund the customer."""
        c4a.escalate("refunds need a person")

    graph = create_agent(
        StepModel(calls=[("refund", {"amount": 5})]),
        [refund],
        middleware=[OnceOnlyLG(ledger=target.open())],
        checkpointer=InMemorySaver(),
    )
    tracer = telemetry.tracer_provider.get_tracer("app")

    def escalating() -> None:
        with tracer.start_as_current_span("job"):
            graph.invoke({"messages": [HumanMessage("refund")]}, LG_CONFIG)

    with pytest.raises(c4a.Escalated):
        escalating()
    spans = telemetry.exporter.get_finished_spans()
    [ended] = [s for s in spans if attrs(s).get("call4agents.escalation.reason")]
    assert attrs(ended)["call4agents.escalation.reason"] == "refunds need a person"
    assert attrs(ended)["call4agents.run.terminal_reason"] == "escalated"


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_langgraph_steps_nest_with_openinferences_spans(
    target: Target, telemetry: Telemetry, tmp_path: Path, use_async: bool
) -> None:
    """With OpenInference's LangChain instrumentation in the same tracer provider, each step is
    its span of the ``model`` node (whose child is its LLM span): one tree, no second span."""
    from openinference.instrumentation.langchain import LangChainInstrumentor

    instrumentor = LangChainInstrumentor()
    instrumentor.instrument(tracer_provider=telemetry.tracer_provider)
    try:
        graph = _graph(target, LgOutbox(tmp_path / "outbox.jsonl"), usage=(120, 30))
        inputs = {"messages": [HumanMessage("mail bob")]}
        with telemetry.tracer_provider.get_tracer("app").start_as_current_span("ticket"):
            if use_async:
                asyncio.run(graph.ainvoke(inputs, LG_CONFIG))
            else:
                graph.invoke(inputs, LG_CONFIG)
    finally:
        instrumentor.uninstrument()
    spans = {s.context.span_id: s for s in telemetry.exporter.get_finished_spans()}

    def parent(span: ReadableSpan) -> ReadableSpan:
        assert span.parent is not None
        return spans[span.parent.span_id]

    def kind(span: ReadableSpan) -> Any:
        return attrs(span).get("openinference.span.kind")

    assert telemetry.spans("call4agents.step") == []  # no duplicate of the instrumentation's
    [ticket] = telemetry.spans("ticket")
    assert {s.context.trace_id for s in spans.values()} == {ticket.context.trace_id}
    nodes = [s for s in spans.values() if s.name == "model" and kind(s) == "CHAIN"]
    nodes.sort(key=lambda s: attrs(s)["call4agents.step.index"])
    assert [attrs(s)["call4agents.step.index"] for s in nodes] == [1, 2, 3]
    assert [attrs(s)["call4agents.step.stop_reason"] for s in nodes] == [
        "tool_call",
        "tool_call",
        "end",
    ]
    [graph_span] = {parent(s).context.span_id for s in nodes}  # all under one graph span
    assert parent(spans[graph_span]).context.span_id == ticket.context.span_id
    llms = [s for s in spans.values() if kind(s) == "LLM"]
    # One LLM span per step, inside it, whose token counts our figures repeat.
    assert sorted(parent(s).context.span_id for s in llms) == sorted(
        s.context.span_id for s in nodes
    )
    for node in nodes:
        [llm] = [s for s in llms if parent(s).context.span_id == node.context.span_id]
        assert attrs(llm)["llm.token_count.prompt"] == attrs(node)["gen_ai.usage.input_tokens"]
        assert attrs(llm)["llm.token_count.completion"] == attrs(node)["gen_ai.usage.output_tokens"]
    # The tool calls between the steps nest under the instrumentation's tools node.
    [ours] = telemetry.ours()
    assert parent(ours).name == "tools"
    assert parent(parent(ours)).context.span_id == graph_span
