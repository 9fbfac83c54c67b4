"""Approvals surface as LangGraph interrupts in HumanInTheLoopMiddleware's per-call shape."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from call4agents import EffectOptions
from call4agents_langgraph import OnceOnly
from tests.langgraph.fake_model import ScriptedModel
from tests.langgraph.helpers import Backend, Outbox, child
from tests.langgraph.test_middleware import BODY, config, emailer, model, tool_messages

NEEDS_APPROVAL = {"send_email": {"approval": True}}
EDIT = {
    "type": "edit",
    "edited_action": {"name": "send_email", "args": {"to": "boss@x", "body": "edited"}},
    "by": "ann",
}


def _agent(backend: Backend, outbox: Outbox, saver: Any, *recipients: str) -> Any:
    once = OnceOnly(ledger=backend.ledger(), tools=NEEDS_APPROVAL)
    return create_agent(
        model(*(recipients or ("bob@x",))),
        [emailer(outbox)],
        middleware=[once],
        checkpointer=saver,
    )


def _pause(agent: Any) -> Any:
    return agent.invoke({"messages": [HumanMessage("mail bob")]}, config(), version="v2")


def test_the_pause_shows_the_exact_call_and_its_ticket(backend: Backend, outbox: Outbox) -> None:
    with backend.saver() as saver:
        [paused] = _pause(_agent(backend, outbox, saver)).interrupts
    value = paused.value
    assert value["type"] == "tool_approval"  # HumanInTheLoopMiddleware's per-call request
    assert value["tool_call_id"] == "call_send_email_1_0"
    assert (value["name"], value["args"]) == ("send_email", {"to": "bob@x", "body": BODY})
    assert value["allowed_decisions"] == ["approve", "edit", "reject"]
    [ticket] = backend.ledger().approvals("thread-1", state="pending")
    assert value["ticket"] == ticket.ticket
    assert value["action_key"] == ticket.key
    assert len(outbox) == 0


def test_approve(backend: Backend, outbox: Outbox) -> None:
    with backend.saver() as saver:
        agent = _agent(backend, outbox, saver)
        _pause(agent)
        done = agent.invoke(Command(resume={"type": "approve", "by": "ann"}), config())
    assert [line["to"] for line in outbox.lines()] == ["bob@x"]
    assert [m.status for m in tool_messages(done)] == ["success"]
    [ticket] = backend.ledger().approvals("thread-1")
    assert (ticket.state, ticket.decided_by) == ("spent", "ann")


def test_edit_is_a_yes_to_the_edited_call_only(backend: Backend, outbox: Outbox) -> None:
    ledger = backend.ledger()
    with backend.saver() as saver:
        agent = _agent(backend, outbox, saver)
        _pause(agent)
        done = agent.invoke(Command(resume=EDIT), config())
    assert outbox.lines()[0]["to"] == "boss@x"
    assert len(outbox) == 1
    [message] = tool_messages(done)
    assert "a person edited this tool call" in str(message.content)
    [record] = ledger.effects("thread-1")
    assert record.args == {"to": "boss@x", "body": "edited"}
    states = {json.dumps(t.args, sort_keys=True): t.state for t in ledger.approvals("thread-1")}
    # The model's own call was never approved; only the edited one, and its yes is spent.
    assert states == {
        json.dumps({"body": BODY, "to": "bob@x"}): "pending",
        json.dumps({"body": "edited", "to": "boss@x"}): "spent",
    }


def test_reject(backend: Backend, outbox: Outbox) -> None:
    with backend.saver() as saver:
        agent = _agent(backend, outbox, saver)
        _pause(agent)
        answer = {"type": "reject", "message": "wrong customer", "by": "ann"}
        done = agent.invoke(Command(resume=answer), config())
    assert len(outbox) == 0
    [message] = tool_messages(done)
    assert message.status == "error"
    assert "denied by ann: wrong customer" in str(message.content)
    [ticket] = backend.ledger().approvals("thread-1")
    assert ticket.state == "denied"


def test_a_plain_hitl_answer_works(sqlite_backend: Backend, outbox: Outbox) -> None:
    agent = _agent(sqlite_backend, outbox, InMemorySaver())
    _pause(agent)
    agent.invoke(Command(resume={"type": "approve"}), config())  # no "by": a UI built for HITL
    [ticket] = sqlite_backend.ledger().approvals("thread-1")
    assert ticket.state == "spent"
    assert ticket.decided_by == "a person, through a LangGraph interrupt"


def test_a_malformed_answer_is_refused_and_can_be_sent_again(
    sqlite_backend: Backend, outbox: Outbox
) -> None:
    agent = _agent(sqlite_backend, outbox, InMemorySaver())
    _pause(agent)
    with pytest.raises(ValueError, match="type"):
        agent.invoke(Command(resume={"type": "maybe"}), config())
    agent.invoke(Command(resume={"type": "approve"}), config())
    assert len(outbox) == 1


def test_parallel_calls_pause_separately(sqlite_backend: Backend, outbox: Outbox) -> None:
    agent = _agent(sqlite_backend, outbox, InMemorySaver(), "ann@x", "bob@x")
    paused = _pause(agent).interrupts
    answers = {
        p.id: {"type": "approve"} if p.value["args"]["to"] == "ann@x" else {"type": "reject"}
        for p in paused
    }
    done = agent.invoke(Command(resume=answers), config())
    assert [line["to"] for line in outbox.lines()] == ["ann@x"]
    assert sorted(m.status for m in tool_messages(done)) == ["error", "success"]


def test_async_graph_approval(sqlite_backend: Backend, outbox: Outbox) -> None:
    async def main() -> None:
        agent = _agent(sqlite_backend, outbox, InMemorySaver())
        await agent.ainvoke({"messages": [HumanMessage("mail bob")]}, config())
        await agent.ainvoke(Command(resume=EDIT), config())

    asyncio.run(main())
    assert [line["to"] for line in outbox.lines()] == ["boss@x"]


@tool
def lookup(q: str) -> str:
    """Read something."""
    return "42"


def test_read_tools_are_never_paused(sqlite_backend: Backend) -> None:
    once = OnceOnly(
        ledger=sqlite_backend.ledger(),
        default=EffectOptions(approval=True),
        tools={"lookup": {"kind": "read"}},
    )
    agent = create_agent(
        ScriptedModel(tool_calls=[("lookup", {"q": "x"})]),
        [lookup],
        middleware=[once],
        checkpointer=InMemorySaver(),
    )
    out = agent.invoke({"messages": [HumanMessage("look")]}, config(), version="v2")
    assert out.interrupts == ()


@pytest.mark.slow
@pytest.mark.parametrize(
    "decision", [{"type": "approve", "by": "ann"}, EDIT], ids=["approve", "edit"]
)
def test_killed_after_the_approved_call_ran(
    backend: Backend, outbox: Outbox, decision: dict[str, Any]
) -> None:
    env = backend.env(
        LG_MODE="once", LG_APPROVAL="1", LG_THREAD="thread-1", LG_OUTBOX=str(outbox.path)
    )
    started = child("agent_child.py", "start", env=env)
    assert started.returncode == 0, started.stderr
    [paused] = started.report["interrupts"]
    assert paused["type"] == "tool_approval"

    answer = {**env, "LG_DECISION": json.dumps(decision), "LG_CRASH": "after"}
    assert child("agent_child.py", "answer", env=answer).killed
    resumed = child("agent_child.py", "resume", env=env)
    assert resumed.returncode == 0, resumed.stderr
    assert len(outbox) == 1  # the answer survived the crash and was not spent twice
    [message] = resumed.report["tool_messages"]
    assert (message["status"], message["outcome"]) == ("success", "deduped")
