"""A parent graph's history names what each step did, when the step ran an agent as a subgraph.

Checkpoints of a subgraph live in their own namespace (``agent:<task id>``) of the same thread.
The window of actions each checkpoint names is kept per namespace, so the parent's checkpoint
of the step that ran the subgraph names the subgraph's actions too, and parallel branches' actions
land in the step that ran them.
"""

from __future__ import annotations

from typing import Any

from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from langgraph.graph import START, MessagesState, StateGraph

import call4agents as c4a
from call4agents_langgraph import LedgerCheckpointer, OnceOnly
from tests.langgraph.helpers import Backend, Outbox
from tests.langgraph.test_middleware import config, emailer, model


def _parent(ledger: c4a.Ledger, outbox: Outbox, saver: Any, *recipients: str) -> Any:
    graph = StateGraph(MessagesState)
    for i, to in enumerate(recipients):
        agent = create_agent(model(to), [emailer(outbox)], middleware=[OnceOnly(ledger=ledger)])
        graph.add_node(f"agent_{i}", agent)
        graph.add_edge(START, f"agent_{i}")  # several: parallel branches of one step
    return graph.compile(checkpointer=LedgerCheckpointer(saver, ledger=ledger))


def _named(history: list[Any]) -> dict[int, list[str]]:
    return {
        s.metadata["step"]: sorted(a["tool"] for a in s.metadata["call4agents"]["actions"])
        for s in history
    }


def test_the_parent_step_that_ran_an_agent_names_its_action(
    backend: Backend, outbox: Outbox
) -> None:
    ledger = backend.ledger()
    with backend.saver() as saver:
        parent = _parent(ledger, outbox, saver, "bob@x")
        parent.invoke({"messages": [HumanMessage("mail bob")]}, config())
        history = list(parent.get_state_history(config()))
    assert len(outbox.lines()) == 1
    assert _named(history) == {-1: [], 0: [], 1: ["send_email"]}


def test_parallel_agents_actions_land_in_the_step_that_ran_them(
    backend: Backend, outbox: Outbox
) -> None:
    ledger = backend.ledger()
    with backend.saver() as saver:
        parent = _parent(ledger, outbox, saver, "bob@x", "ann@x")
        parent.invoke({"messages": [HumanMessage("mail both")]}, config())
        history = list(parent.get_state_history(config()))
    assert len(outbox.lines()) == 2
    assert _named(history) == {-1: [], 0: [], 1: ["send_email", "send_email"]}
