"""Spans of tool calls made through a real create_agent graph and a hand-built ToolNode.

LangChain makes no OpenTelemetry spans of its own, so each action's span must be a child of the
caller's span around ``graph.invoke``, in the same trace, including for sync tools, which
LangGraph runs in its executor threads; and it carries the model's tool_call id. With
OpenInference's LangChain instrumentation on, it is a child of that instrumentation's span of the
tools node instead.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import Command
from opentelemetry.sdk.trace import ReadableSpan

import call4agents as c4a
from call4agents_langgraph import OnceOnly
from tests.conftest import Target
from tests.langgraph.fake_model import StepModel
from tests.langgraph.helpers import Outbox
from tests.otel.conftest import Telemetry

BODY = "Your refund is on its way"


def config(thread: str = "thread-1") -> Any:
    return {"configurable": {"thread_id": thread}}


def emails(*people: str) -> list[tuple[str, dict[str, Any]]]:
    return [("send_email", {"to": to, "body": BODY}) for to in people]


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def parent_id(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


def mailer(outbox: Outbox, *, use_async: bool = False) -> Any:
    if use_async:

        @tool
        async def send_email(to: str, body: str) -> dict[str, str]:
            """Email a customer."""
            outbox.send(to, body)
            return {"id": f"msg-{to}"}

        return send_email

    @tool
    def send_email(to: str, body: str) -> dict[str, str]:
        """Email a customer."""
        outbox.send(to, body)
        return {"id": f"msg-{to}"}

    return send_email


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_span_nests_under_the_callers_span(
    target: Target, telemetry: Telemetry, tmp_path: Path, use_async: bool
) -> None:
    outbox = Outbox(tmp_path / "out.jsonl")
    ledger = target.open()
    graph = create_agent(
        StepModel(calls=emails("ann@x")),
        [mailer(outbox, use_async=use_async)],
        middleware=[OnceOnly(ledger=ledger)],
        checkpointer=InMemorySaver(),
    )
    tracer = telemetry.tracer_provider.get_tracer("app")
    with tracer.start_as_current_span("handle ticket") as root:
        inputs = {"messages": [HumanMessage("mail ann")]}
        if use_async:
            asyncio.run(graph.ainvoke(inputs, config()))
        else:
            graph.invoke(inputs, config())
    [ours] = telemetry.ours()
    assert ours.name == "execute_tool send_email"
    assert ours.context is not None
    assert ours.context.trace_id == root.get_span_context().trace_id
    assert parent_id(ours) == root.get_span_context().span_id
    a = attrs(ours)
    assert a["gen_ai.tool.call.id"] == "call_0"
    assert a["gen_ai.operation.name"] == "execute_tool"
    assert a["call4agents.run.id"] == "thread-1"
    assert a["call4agents.outcome"] == "ok"
    assert a["call4agents.side_effect"] == "write"
    assert a["call4agents.external_id"] == "msg-ann@x"  # from inside the recorded ToolMessage
    [record] = ledger.effects("thread-1")
    assert a["call4agents.idempotency_key"] == record.idempotency_key
    assert a["call4agents.action.key"] == record.key
    assert outbox.lines()[0]["to"] == "ann@x"


def test_hand_built_toolnode_spans_nest_too(
    target: Target, telemetry: Telemetry, tmp_path: Path
) -> None:
    outbox = Outbox(tmp_path / "out.jsonl")
    once = OnceOnly(ledger=target.open())
    model = StepModel(calls=emails("ann@x", "bob@x"))
    builder = StateGraph(MessagesState)
    builder.add_node("agent", lambda state: {"messages": [model.invoke(state["messages"])]})
    builder.add_node("tools", ToolNode([mailer(outbox)], wrap_tool_call=once.wrap_tool_call))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    graph = builder.compile(checkpointer=InMemorySaver())
    tracer = telemetry.tracer_provider.get_tracer("app")
    with tracer.start_as_current_span("job") as root:
        graph.invoke({"messages": [HumanMessage("mail them")]}, config())
    spans = telemetry.ours()
    assert [attrs(s)["gen_ai.tool.call.id"] for s in spans] == ["call_0", "call_1"]
    assert {parent_id(s) for s in spans} == {root.get_span_context().span_id}


def test_a_sub_agents_span_nests_under_the_tool_that_called_it(
    target: Target, telemetry: Telemetry, tmp_path: Path
) -> None:
    outbox = Outbox(tmp_path / "out.jsonl")
    ledger = target.open()
    sub_agent = create_agent(
        StepModel(calls=emails("team@x")), [mailer(outbox)], middleware=[OnceOnly(ledger=ledger)]
    )

    @tool
    def delegate(task: str) -> str:
        """Hand a task to the mailing agent."""
        out = sub_agent.invoke({"messages": [HumanMessage(task)]}, config("sub-thread"))
        return str(out["messages"][-1].content)

    graph = create_agent(
        StepModel(calls=[("delegate", {"task": "mail the team"})]),
        [delegate],
        middleware=[OnceOnly(ledger=ledger)],
        checkpointer=InMemorySaver(),
    )
    graph.invoke({"messages": [HumanMessage("get it done")]}, config("parent"))
    inner, outer = telemetry.ours()  # the inner one ends first
    assert (outer.name, inner.name) == ("execute_tool delegate", "execute_tool send_email")
    assert outer.context is not None
    assert inner.context is not None
    assert parent_id(inner) == outer.context.span_id
    assert inner.context.trace_id == outer.context.trace_id
    assert attrs(inner)["call4agents.run.id"] == "sub-thread"


def test_outcomes_ok_and_deduped(target: Target, telemetry: Telemetry, tmp_path: Path) -> None:
    outbox = Outbox(tmp_path / "out.jsonl")
    graph = create_agent(
        StepModel(calls=emails("ann@x", "ann@x")),  # the same email twice in one thread
        [mailer(outbox)],
        middleware=[OnceOnly(ledger=target.open())],
        checkpointer=InMemorySaver(),
    )
    graph.invoke({"messages": [HumanMessage("mail ann")]}, config())
    ran, repeat = telemetry.ours()
    assert [attrs(s)["call4agents.outcome"] for s in (ran, repeat)] == ["ok", "deduped"]
    assert [attrs(s)["gen_ai.tool.call.id"] for s in (ran, repeat)] == ["call_0", "call_1"]
    assert attrs(ran)["call4agents.attempt"] == 1
    assert "call4agents.attempt" not in attrs(repeat)  # nothing ran
    assert attrs(ran)["call4agents.action.key"] == attrs(repeat)["call4agents.action.key"]
    assert len(outbox) == 1


@pytest.mark.parametrize(
    ("raised", "outcome"),
    [(ValueError("no such mailbox"), "error"), (c4a.OutcomeUnknown("hung up"), "in_doubt")],
)
def test_outcomes_error_and_in_doubt(
    target: Target, telemetry: Telemetry, raised: Exception, outcome: str
) -> None:
    @tool
    def send_email(to: str, body: str) -> str:
        """Email a customer."""
        raise raised

    graph = create_agent(
        StepModel(calls=emails("ann@x")),
        [send_email],
        middleware=[OnceOnly(ledger=target.open())],
        checkpointer=InMemorySaver(),
    )
    with pytest.raises(type(raised)):  # create_agent's ToolNode re-raises a tool's exception
        graph.invoke({"messages": [HumanMessage("mail ann")]}, config())
    [span] = telemetry.ours()
    a = attrs(span)
    assert a["call4agents.outcome"] == outcome
    assert a["error.type"] == type(raised).__qualname__
    assert a["gen_ai.tool.call.id"] == "call_0"
    assert span.status.status_code.name == "ERROR"
    if outcome == "in_doubt":
        # The resume meets the doubt: no run, and the model is told, not the tool re-run.
        graph.invoke(None, config())
        again = telemetry.ours()[-1]
        assert attrs(again)["call4agents.outcome"] == "in_doubt"
        assert attrs(again)["error.type"] == "EffectInDoubt"


def test_outcome_denied(target: Target, telemetry: Telemetry, tmp_path: Path) -> None:
    outbox = Outbox(tmp_path / "out.jsonl")
    once = OnceOnly(ledger=target.open(), tools={"send_email": {"approval": True}})
    graph = create_agent(
        StepModel(calls=emails("ann@x")),
        [mailer(outbox)],
        middleware=[once],
        checkpointer=InMemorySaver(),
    )
    paused = graph.invoke({"messages": [HumanMessage("mail ann")]}, config(), version="v2")
    [pause] = paused.interrupts
    asked = telemetry.ours()[-1]
    assert attrs(asked)["call4agents.outcome"] == "approval_required"
    assert attrs(asked)["call4agents.approval.ticket"] == pause.value["ticket"]
    graph.invoke(Command(resume={"type": "reject", "by": "ann"}), config(), version="v2")
    denied = telemetry.ours()[-1]
    a = attrs(denied)
    assert a["call4agents.outcome"] == "denied"
    assert a["call4agents.approval.decided_by"] == "ann"
    assert a["call4agents.approval.ticket"] == pause.value["ticket"]
    assert a["gen_ai.tool.call.id"] == "call_0"
    assert len(outbox) == 0


def test_a_budget_cut_is_an_error_span(
    target: Target, telemetry: Telemetry, tmp_path: Path
) -> None:
    outbox = Outbox(tmp_path / "out.jsonl")
    once = OnceOnly(ledger=target.open(), budget=c4a.Budget(max_tool_calls=1))
    graph = create_agent(
        StepModel(calls=emails("ann@x", "bob@x")),
        [mailer(outbox)],
        middleware=[once],
        checkpointer=InMemorySaver(),
    )
    tracer = telemetry.tracer_provider.get_tracer("app")
    with pytest.raises(c4a.BudgetExceeded), tracer.start_as_current_span("job"):
        graph.invoke({"messages": [HumanMessage("mail them")]}, config())
    spans = telemetry.ours()
    assert [attrs(s)["call4agents.outcome"] for s in spans] == ["ok", "error"]
    assert attrs(spans[1])["error.type"] == "BudgetExceeded"
    assert attrs(spans[1])["gen_ai.tool.call.id"] == "call_1"
    assert len(outbox) == 1


NO_ARGS = ("gen_ai.tool.call.arguments", "gen_ai.tool.call.result")


def test_outcome_in_progress_while_another_worker_runs_it(
    target: Target, telemetry: Telemetry, tmp_path: Path
) -> None:
    """Two workers on one thread: the second meets the first's call still running."""
    outbox = Outbox(tmp_path / "out.jsonl")
    inside, release = threading.Event(), threading.Event()

    @tool
    def send_email(to: str, body: str) -> dict[str, str]:
        """Email a customer."""
        inside.set()
        assert release.wait(30)
        outbox.send(to, body)
        return {"id": f"msg-{to}"}

    def worker(wait: float) -> Any:
        once = OnceOnly(ledger=target.open(), default=c4a.EffectOptions(wait=wait))
        return create_agent(
            StepModel(calls=emails("ann@x")),
            [send_email],
            middleware=[once],
            checkpointer=InMemorySaver(),  # each worker its own: only the ledger is shared
        )

    first = threading.Thread(
        target=worker(30).invoke, args=({"messages": [HumanMessage("mail ann")]}, config())
    )
    first.start()
    try:
        assert inside.wait(30)
        out = worker(0).invoke({"messages": [HumanMessage("mail ann")]}, config())
    finally:
        release.set()
        first.join(30)
    told = [m for m in out["messages"] if m.type == "tool"]
    assert "still running in another worker" in str(told[0].content)
    outcomes = {attrs(s)["call4agents.outcome"]: s for s in telemetry.ours()}
    assert sorted(outcomes) == ["in_progress", "ok"]
    busy = attrs(outcomes["in_progress"])
    assert busy["gen_ai.tool.call.id"] == "call_0"
    assert busy["error.type"] == "EffectInProgress"
    assert "call4agents.attempt" not in busy  # this worker ran nothing
    assert outcomes["in_progress"].status.status_code.name == "ERROR"
    assert len(outbox) == 1


def test_outcome_timeout_with_the_tools_latency(target: Target, telemetry: Telemetry) -> None:
    @tool
    def send_email(to: str, body: str) -> str:
        """Email a customer."""
        time.sleep(0.05)
        raise TimeoutError("the mail server did not answer")

    graph = create_agent(
        StepModel(calls=emails("ann@x")),
        [send_email],
        middleware=[OnceOnly(ledger=target.open())],
        checkpointer=InMemorySaver(),
    )
    with pytest.raises(TimeoutError):  # create_agent's ToolNode re-raises a tool's exception
        graph.invoke({"messages": [HumanMessage("mail ann")]}, config())
    [span] = telemetry.ours()
    a = attrs(span)
    assert a["call4agents.outcome"] == "timeout"
    assert a["error.type"] == "TimeoutError"
    assert a["gen_ai.tool.call.id"] == "call_0"
    assert span.status.status_code.name == "ERROR"
    assert 0.05 <= a["call4agents.tool.duration"] < 30
    [latency] = telemetry.points("call4agents.action.duration")
    assert latency.count == 1
    assert latency.sum >= a["call4agents.tool.duration"]  # the action includes the ledger work


@pytest.mark.parametrize("ending", ["escalated", "step_limit"])
def test_the_callers_span_carries_the_runs_ending(
    target: Target, telemetry: Telemetry, tmp_path: Path, ending: str
) -> None:
    outbox = Outbox(tmp_path / "out.jsonl")

    @tool
    def refund(amount: int) -> str:
        """Refund the customer."""
        c4a.escalate("refunds need a person")

    budget = c4a.Budget(max_tool_calls=1) if ending == "step_limit" else None
    graph = create_agent(
        StepModel(calls=[*emails("ann@x"), ("refund", {"amount": 500})]),
        [mailer(outbox), refund],
        middleware=[OnceOnly(ledger=target.open(), budget=budget)],
        checkpointer=InMemorySaver(),
    )
    tracer = telemetry.tracer_provider.get_tracer("app")
    expected = c4a.Escalated if ending == "escalated" else c4a.BudgetExceeded
    with pytest.raises(expected), tracer.start_as_current_span("handle ticket"):
        graph.invoke({"messages": [HumanMessage("refund ann")]}, config())
    [job] = telemetry.spans("handle ticket")
    assert attrs(job)["call4agents.run.terminal_reason"] == ending
    assert attrs(job)["call4agents.run.id"] == "thread-1"
    [ended] = telemetry.points("call4agents.runs.ended")
    assert dict(ended.attributes) == {"call4agents.run.terminal_reason": ending}
    assert ended.value == 1  # counted once, where the ending was recorded
    assert len(outbox) == 1


def test_no_arguments_or_results_on_spans_by_default(
    target: Target, telemetry: Telemetry, tmp_path: Path
) -> None:
    outbox = Outbox(tmp_path / "out.jsonl")
    graph = create_agent(
        StepModel(calls=emails("ann@x", "ann@x")),
        [mailer(outbox)],
        middleware=[OnceOnly(ledger=target.open())],
        checkpointer=InMemorySaver(),
    )
    graph.invoke({"messages": [HumanMessage("mail ann")]}, config())
    spans = telemetry.ours()
    assert [attrs(s)["call4agents.outcome"] for s in spans] == ["ok", "deduped"]
    for span in spans:
        assert not set(NO_ARGS) & set(attrs(span))
        assert BODY not in repr(attrs(span))  # the body is an argument, never an attribute


def test_arguments_and_results_when_opted_in(
    target: Target, telemetry_with_args: Telemetry, tmp_path: Path
) -> None:
    outbox = Outbox(tmp_path / "out.jsonl")
    graph = create_agent(
        StepModel(calls=emails("ann@x")),
        [mailer(outbox)],
        middleware=[OnceOnly(ledger=target.open())],
        checkpointer=InMemorySaver(),
    )
    graph.invoke({"messages": [HumanMessage("mail ann")]}, config())
    [span] = telemetry_with_args.ours()
    a = attrs(span)
    assert '"to":"ann@x"' in a["gen_ai.tool.call.arguments"]
    assert "msg-ann@x" in a["gen_ai.tool.call.result"]


@pytest.fixture
def openinference(telemetry: Telemetry) -> Iterator[Telemetry]:
    """OpenInference's LangChain instrumentation on, into the same in-memory exporter."""
    from openinference.instrumentation.langchain import LangChainInstrumentor

    instrumentor = LangChainInstrumentor()
    instrumentor.instrument(tracer_provider=telemetry.tracer_provider)
    try:
        yield telemetry
    finally:
        instrumentor.uninstrument()


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_span_nests_under_the_langchain_instrumentations_node_span(
    target: Target, openinference: Telemetry, tmp_path: Path, use_async: bool
) -> None:
    """The instrumentation never makes its spans current: ours would start a trace of its own."""
    outbox = Outbox(tmp_path / "out.jsonl")
    graph = create_agent(
        StepModel(calls=emails("ann@x")),
        [mailer(outbox, use_async=use_async)],
        middleware=[OnceOnly(ledger=target.open())],
        checkpointer=InMemorySaver(),
    )
    inputs = {"messages": [HumanMessage("mail ann")]}
    if use_async:
        asyncio.run(graph.ainvoke(inputs, config()))
    else:
        graph.invoke(inputs, config())
    spans = {s.context.span_id: s for s in openinference.exporter.get_finished_spans()}
    [ours] = openinference.ours()
    assert ours.parent is not None
    node = spans[ours.parent.span_id]
    assert node.instrumentation_scope is not None
    assert node.instrumentation_scope.name == "openinference.instrumentation.langchain"
    assert node.name == "tools"  # the LangGraph node that ran the tool call
    assert node.context.trace_id == ours.context.trace_id
    [framework_tool] = [s for s in spans.values() if s.name == "send_email"]
    assert framework_tool.context.trace_id == ours.context.trace_id
    assert attrs(ours)["gen_ai.tool.call.id"] == "call_0"
    assert len(outbox) == 1
