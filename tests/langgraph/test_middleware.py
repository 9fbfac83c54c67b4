"""OnceOnly as create_agent middleware and as a ToolNode wrapper, in one process."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware, HumanInTheLoopMiddleware
from langchain_core.messages import HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import Command

import call4agents as c4a
from call4agents_langgraph import OnceOnly
from tests.langgraph.fake_model import ScriptedModel
from tests.langgraph.helpers import Backend, Outbox

BODY = "Your refund is on its way"


def emailer(outbox: Outbox) -> Any:
    @tool
    def send_email(to: str, body: str) -> str:
        """Send an email."""
        return outbox.send(to, body)

    return send_email


def model(*recipients: str) -> ScriptedModel:
    return ScriptedModel(tool_calls=[("send_email", {"to": to, "body": BODY}) for to in recipients])


def config(thread: str = "thread-1") -> Any:
    return {"configurable": {"thread_id": thread}}


def tool_messages(out: Any) -> list[ToolMessage]:
    messages = out.value["messages"] if hasattr(out, "value") else out["messages"]
    return [m for m in messages if isinstance(m, ToolMessage)]


def outcome(message: ToolMessage) -> str | None:
    return message.response_metadata.get("call4agents", {}).get("outcome")


def test_a_repeat_in_the_thread_returns_the_recorded_result(
    backend: Backend, outbox: Outbox
) -> None:
    once = OnceOnly(ledger=backend.ledger())
    with backend.saver() as saver:
        agent = create_agent(
            model("bob@x"), [emailer(outbox)], middleware=[once], checkpointer=saver
        )
        first = agent.invoke({"messages": [HumanMessage("mail bob")]}, config())
        second = agent.invoke({"messages": [HumanMessage("mail bob again")]}, config())
    assert len(outbox) == 1
    ran, repeat = tool_messages(second)
    assert tool_messages(first) == [ran]
    assert (outcome(ran), outcome(repeat)) == ("ran", "deduped")
    assert repeat.content == ran.content == "sent to bob@x"
    assert repeat.tool_call_id == "call_send_email_2_0"  # answers the new call, not the old one
    [record] = once.ledger.effects("thread-1")  # type: ignore[union-attr]
    assert (record.tool, record.state, record.args) == (
        "send_email",
        "succeeded",
        {"to": "bob@x", "body": BODY},
    )


def test_threads_are_separate_runs(sqlite_backend: Backend, outbox: Outbox) -> None:
    once = OnceOnly(ledger=sqlite_backend.ledger())
    agent = create_agent(
        model("bob@x"), [emailer(outbox)], middleware=[once], checkpointer=InMemorySaver()
    )
    for thread in ("t1", "t2"):
        agent.invoke({"messages": [HumanMessage("mail bob")]}, config(thread))
    assert len(outbox) == 2


def test_scope_call_keys_by_tool_call_id(sqlite_backend: Backend, outbox: Outbox) -> None:
    once = OnceOnly(ledger=sqlite_backend.ledger(), tools={"send_email": {"scope": "call"}})
    agent = create_agent(
        model("bob@x"), [emailer(outbox)], middleware=[once], checkpointer=InMemorySaver()
    )
    agent.invoke({"messages": [HumanMessage("mail bob")]}, config())
    agent.invoke({"messages": [HumanMessage("mail bob again")]}, config())
    assert len(outbox) == 2  # a new tool call id: a deliberate repeat


def test_read_tools_pass_straight_through(sqlite_backend: Backend, outbox: Outbox) -> None:
    @tool
    def lookup(q: str) -> str:
        """Read something."""
        outbox.send("lookup", q)
        return "42"

    ledger = sqlite_backend.ledger()
    once = OnceOnly(ledger=ledger, tools={"lookup": {"kind": "read"}})
    agent = create_agent(
        ScriptedModel(tool_calls=[("lookup", {"q": "x"})]),
        [lookup],
        middleware=[once],
        checkpointer=InMemorySaver(),
    )
    agent.invoke({"messages": [HumanMessage("look")]}, config())
    agent.invoke({"messages": [HumanMessage("look again")]}, config())
    assert len(outbox) == 2
    assert ledger.effects() == []


def test_parallel_calls_each_get_their_own_outcome(backend: Backend, outbox: Outbox) -> None:
    @tool
    def send_email(to: str, body: str) -> str:
        """Send an email."""
        if to == "flaky@x":
            outbox.send(to, body)
            raise c4a.OutcomeUnknown("the mail server timed out after accepting the message")
        return outbox.send(to, body)

    once = OnceOnly(ledger=backend.ledger())
    with backend.saver() as saver:
        agent = create_agent(
            model("ann@x", "flaky@x", "cy@x"), [send_email], middleware=[once], checkpointer=saver
        )
        # The flaky call raises out of the graph (create_agent's default); the two others
        # finished, and their writes were saved with the step.
        with pytest.raises(c4a.OutcomeUnknown):
            agent.invoke({"messages": [HumanMessage("mail all")]}, config(), durability="sync")
        out = agent.invoke(None, config())
    assert sorted(line["to"] for line in outbox.lines()) == ["ann@x", "cy@x", "flaky@x"]
    ann, flaky, cy = tool_messages(out)
    assert (ann.status, cy.status, flaky.status) == ("success", "success", "error")
    assert "may or may not have run" in str(flaky.content)
    [doubt] = once.ledger.in_doubt()  # type: ignore[union-attr]
    assert doubt.args["to"] == "flaky@x"


def test_async_graph(backend: Backend, outbox: Outbox) -> None:
    @tool
    async def send_email(to: str, body: str) -> str:
        """Send an email."""
        return outbox.send(to, body)

    async def main() -> list[ToolMessage]:
        once = OnceOnly(ledger=backend.ledger())
        async with backend.asaver() as saver:
            agent = create_agent(
                model("ann@x", "bob@x"), [send_email], middleware=[once], checkpointer=saver
            )
            await agent.ainvoke({"messages": [HumanMessage("mail")]}, config())
            out = await agent.ainvoke({"messages": [HumanMessage("mail again")]}, config())
            return tool_messages(out)

    messages = asyncio.run(main())
    assert sorted(line["to"] for line in outbox.lines()) == ["ann@x", "bob@x"]
    assert [outcome(m) for m in messages] == ["ran", "ran", "deduped", "deduped"]


def test_a_tool_error_is_recorded_and_raised_as_langchain_does(
    sqlite_backend: Backend, outbox: Outbox
) -> None:
    calls: list[int] = []

    @tool
    def send_email(to: str, body: str) -> str:
        """Send an email."""
        calls.append(1)
        if len(calls) == 1:
            raise ConnectionRefusedError("mail server down")
        return outbox.send(to, body)

    ledger = sqlite_backend.ledger()
    agent = create_agent(
        model("bob@x"),
        [send_email],
        middleware=[OnceOnly(ledger=ledger)],
        checkpointer=InMemorySaver(),
    )
    # create_agent's ToolNode re-raises a tool's exception (only argument errors become messages).
    with pytest.raises(ConnectionRefusedError):
        agent.invoke({"messages": [HumanMessage("mail bob")]}, config())
    [failed] = ledger.effects()
    assert (failed.state, failed.error) == ("failed", "ConnectionRefusedError: mail server down")
    agent.invoke(None, config())  # a failed action did not act: the resume runs it again
    [done] = ledger.effects()
    assert (done.state, done.attempt, len(outbox)) == ("succeeded", 2, 1)


def test_handled_tool_errors_are_recorded_as_failed(sqlite_backend: Backend) -> None:
    @tool
    def send_email(to: str, body: str) -> str:
        """Send an email."""
        raise ValueError("no such mailbox")

    ledger = sqlite_backend.ledger()
    once = OnceOnly(ledger=ledger)
    graph = _toolnode_graph(model("bob@x"), [send_email], once, handle_tool_errors=True)
    out = graph.invoke({"messages": [HumanMessage("mail bob")]}, config())
    [message] = tool_messages(out)
    assert message.status == "error"
    assert "no such mailbox" in str(message.content)
    [record] = ledger.effects()
    assert record.state == "failed"  # not a result to hand back on a repeat


def test_toolnode_wrapper_dedupes_a_replay(sqlite_backend: Backend, outbox: Outbox) -> None:
    once = OnceOnly(ledger=sqlite_backend.ledger())
    graph = _toolnode_graph(model("bob@x"), [emailer(outbox)], once)
    graph.invoke({"messages": [HumanMessage("mail bob")]}, config())
    before_tools = next(s for s in graph.get_state_history(config()) if s.next == ("tools",))
    replay = graph.invoke(None, before_tools.config)
    assert len(outbox) == 1
    assert outcome(tool_messages(replay)[-1]) == "deduped"


def _toolnode_graph(chat: ScriptedModel, tools: list[Any], once: OnceOnly, **toolnode: Any) -> Any:
    builder = StateGraph(MessagesState)
    builder.add_node("agent", lambda state: {"messages": [chat.invoke(state["messages"])]})
    builder.add_node(
        "tools",
        ToolNode(
            tools,
            wrap_tool_call=once.wrap_tool_call,
            awrap_tool_call=once.awrap_tool_call,
            **toolnode,
        ),
    )
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    return builder.compile(checkpointer=InMemorySaver())


def test_no_thread_id_fails_with_the_fix(sqlite_backend: Backend, outbox: Outbox) -> None:
    agent = create_agent(
        model("bob@x"), [emailer(outbox)], middleware=[OnceOnly(ledger=sqlite_backend.ledger())]
    )
    with pytest.raises(c4a.ConfigurationError, match="checkpointer") as caught:
        agent.invoke({"messages": [HumanMessage("mail bob")]})
    assert "thread_id" in str(caught.value)
    assert len(outbox) == 0


def test_misspelt_tool_options_fail_at_construction() -> None:
    with pytest.raises(c4a.ConfigurationError, match="Valid fields: name, kind"):
        OnceOnly(tools={"send_email": {"kinds": "read"}})
    with pytest.raises(c4a.ConfigurationError, match="kind="):
        OnceOnly(tools={"send_email": {"kind": "reads"}})


# -- order against HumanInTheLoopMiddleware ------------------------------------------------------

EDIT = {
    "type": "edit",
    "edited_action": {"name": "send_email", "args": {"to": "boss@x", "body": "edited"}},
}


def _review(agent: Any, mode: str, thread: str = "thread-1") -> Any:
    paused = agent.invoke({"messages": [HumanMessage("mail bob")]}, config(thread), version="v2")
    answer = {"decisions": [EDIT]} if mode == "batched" else {paused.interrupts[0].id: EDIT}
    return agent.invoke(Command(resume=answer), config(thread), version="v2")


@pytest.mark.parametrize("mode", ["batched", "per_call"])
def test_after_hitl_the_edited_call_is_what_is_recorded(
    sqlite_backend: Backend, outbox: Outbox, mode: str
) -> None:
    ledger = sqlite_backend.ledger()
    hitl = HumanInTheLoopMiddleware(interrupt_on={"send_email": True}, interrupt_mode=mode)  # type: ignore[arg-type]
    agent = create_agent(
        model("bob@x"),
        [emailer(outbox)],
        middleware=[hitl, OnceOnly(ledger=ledger)],
        checkpointer=InMemorySaver(),
    )
    _review(agent, mode)
    assert [line["to"] for line in outbox.lines()] == ["boss@x"]
    [record] = ledger.effects()
    assert record.args == {"to": "boss@x", "body": "edited"}


@pytest.mark.parametrize("mode", ["batched", "per_call"])
def test_before_hitl_is_refused_before_anything_runs(
    sqlite_backend: Backend, outbox: Outbox, mode: str
) -> None:
    ledger = sqlite_backend.ledger()
    hitl = HumanInTheLoopMiddleware(interrupt_on={"send_email": True}, interrupt_mode=mode)  # type: ignore[arg-type]
    agent = create_agent(
        model("bob@x"),
        [emailer(outbox)],
        middleware=[OnceOnly(ledger=ledger), hitl],
        checkpointer=InMemorySaver(),
    )
    with pytest.raises(c4a.ConfigurationError, match=r"middleware=\[HumanInTheLoopMiddleware"):
        _review(agent, mode)
    assert len(outbox) == 0
    assert all(r.state == "failed" for r in ledger.effects())


def test_a_result_too_big_to_store_still_reaches_the_model_once(
    sqlite_backend: Backend, outbox: Outbox
) -> None:
    ledger = sqlite_backend.target.open(max_result_bytes=64)  # smaller than any ToolMessage
    agent = create_agent(
        model("bob@x"),
        [emailer(outbox)],
        middleware=[OnceOnly(ledger=ledger)],
        checkpointer=InMemorySaver(),
    )
    first = agent.invoke({"messages": [HumanMessage("mail bob")]}, config())
    again = agent.invoke({"messages": [HumanMessage("mail bob again")]}, config())
    ran, repeat = tool_messages(again)
    assert tool_messages(first) == [ran]
    assert (ran.status, ran.content) == ("success", "sent to bob@x")
    assert repeat.status == "error"
    assert "already ran; its result is not available" in str(repeat.content)
    assert len(outbox) == 1


def test_credentials_are_refused_with_the_reason() -> None:
    with pytest.raises(c4a.ConfigurationError, match="strips injected arguments"):
        OnceOnly(tools={"send_email": {"credentials": {"api_key": "MAIL_API_KEY"}}})


def test_a_tool_added_in_wrap_model_call_is_rejected_by_the_tool_node_instead(
    backend: Backend, outbox: Outbox
) -> None:
    # LangChain rejects a tool another middleware adds in wrap_model_call, unless any middleware
    # wraps tool calls (it may run such tools): with OnceOnly in the list the check is skipped.
    refunded: list[int] = []

    @tool
    def refund(amount: int) -> str:
        """Refund an amount."""
        refunded.append(amount)
        return "refunded"

    class AddsATool(AgentMiddleware[Any, Any]):
        def wrap_model_call(self, request: Any, handler: Any) -> Any:
            return handler(request.override(tools=[*request.tools, refund]))

    def agent(*middleware: AgentMiddleware[Any, Any]) -> Any:
        scripted = ScriptedModel(tool_calls=[("refund", {"amount": 5})])
        return create_agent(scripted, [emailer(outbox)], middleware=[AddsATool(), *middleware])

    ask = {"messages": [HumanMessage("refund me")]}
    with pytest.raises(ValueError, match="Middleware added tools"):
        agent().invoke(ask, config())  # bare: LangChain's own check, before the model is called
    once = OnceOnly(ledger=backend.ledger())
    [told] = tool_messages(agent(once).invoke(ask, config()))
    assert told.status == "error"
    assert "refund is not a valid tool" in str(told.content)  # the ToolNode's own answer
    assert refunded == []
    assert once.ledger.effects("thread-1") == []  # type: ignore[union-attr]
