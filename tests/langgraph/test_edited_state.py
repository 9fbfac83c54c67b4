"""A LangGraph resume value covers only the arguments the ledger showed for that call.

The interrupt's answer (``{"type": "approve"}``) is keyed to the paused call, not to arguments.
A checkpoint edited after the pause (``update_state`` with other arguments for the same tool
call) and resumed with that approve runs nothing: the call asks again, showing what changed,
however often it is resumed; a person's yes to the new arguments in the ledger lets them run.
"""

from __future__ import annotations

from typing import Any

from langchain.agents import create_agent
from langchain_core.messages import AIMessage
from langgraph.types import Command

from call4agents_langgraph import OnceOnly
from tests.langgraph.helpers import Backend, Outbox
from tests.langgraph.test_approvals import NEEDS_APPROVAL, _pause
from tests.langgraph.test_middleware import config, emailer, model

APPROVE = {"type": "approve", "by": "ann"}


def _agent(outbox: Outbox, saver: Any, once: OnceOnly) -> Any:
    return create_agent(model("bob@x"), [emailer(outbox)], middleware=[once], checkpointer=saver)


def _edit(agent: Any, to: str) -> None:
    last = agent.get_state(config()).values["messages"][-1]
    assert isinstance(last, AIMessage)
    calls = [{**c, "args": {**c["args"], "to": to}} for c in last.tool_calls]
    agent.update_state(config(), {"messages": [last.model_copy(update={"tool_calls": calls})]})


def test_an_edited_checkpoint_resumed_with_approve_runs_nothing(
    backend: Backend, outbox: Outbox
) -> None:
    ledger = backend.ledger()
    with backend.saver() as saver:
        agent = _agent(outbox, saver, OnceOnly(ledger=ledger, tools=NEEDS_APPROVAL))
        _pause(agent)
        _edit(agent, "mallory@x")
        for _ in range(3):
            paused = agent.invoke(Command(resume=APPROVE), config(), version="v2")
            [asked] = paused.interrupts
            assert asked.value["args"]["to"] == "mallory@x"
            assert asked.value["changed_from"]["to"] == "bob@x"
        assert len(outbox) == 0
        [new] = [t for t in ledger.approvals("thread-1") if t.args["to"] == "mallory@x"]
        assert new.state == "pending"
        ledger.approve(new.ticket, by="lead")  # a person decides the new arguments
        agent.invoke(Command(resume=APPROVE), config())
    assert [line["to"] for line in outbox.lines()] == ["mallory@x"]
