"""@once.node: side effects inside custom nodes, which LangGraph re-runs from the top on resume."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt
from typing_extensions import TypedDict

import call4agents as c4a
from call4agents_langgraph import OnceOnly
from tests.langgraph.helpers import Backend, Outbox, child


class State(TypedDict, total=False):
    amount: int
    receipt: str
    answer: str


def config(thread: str = "thread-1") -> Any:
    return {"configurable": {"thread_id": thread}}


def one_node_graph(node: Any, saver: Any) -> Any:
    builder = StateGraph(State)
    builder.add_node("pay", node)
    builder.add_edge(START, "pay")
    builder.add_edge("pay", END)
    return builder.compile(checkpointer=saver)


@pytest.mark.parametrize(("decorated", "charges"), [(False, 2), (True, 1)])
def test_side_effect_before_interrupt_happens_once(
    backend: Backend, outbox: Outbox, decorated: bool, charges: int
) -> None:
    once = OnceOnly(ledger=backend.ledger())

    def charge_card(amount: int) -> str:
        outbox.send("card", str(amount))
        return f"receipt-{amount}"

    def pay(state: State) -> State:
        charge = once.call if decorated else (lambda fn, *a: fn(*a))
        receipt = charge(charge_card, state["amount"])
        answer = interrupt({"receipt": receipt, "question": "send the receipt?"})
        return {"receipt": receipt, "answer": answer}

    with backend.saver() as saver:
        graph = one_node_graph(once.node(pay) if decorated else pay, saver)
        paused = graph.invoke({"amount": 5}, config(), version="v2")
        assert paused.interrupts[0].value["receipt"] == "receipt-5"
        done = graph.invoke(Command(resume="yes"), config())
    assert done == {"amount": 5, "receipt": "receipt-5", "answer": "yes"}
    assert len(outbox) == charges


def test_async_node(sqlite_backend: Backend, outbox: Outbox) -> None:
    once = OnceOnly(ledger=sqlite_backend.ledger())

    async def charge_card(amount: int) -> str:
        outbox.send("card", str(amount))
        return f"receipt-{amount}"

    @once.node
    async def pay(state: State) -> State:
        receipt = await once.acall(charge_card, amount=state["amount"])
        return {"receipt": receipt, "answer": interrupt("ok?")}

    async def main() -> Any:
        async with sqlite_backend.asaver() as saver:
            graph = one_node_graph(pay, saver)
            await graph.ainvoke({"amount": 7}, config())
            return await graph.ainvoke(Command(resume="ok"), config())

    assert asyncio.run(main())["receipt"] == "receipt-7"
    assert len(outbox) == 1


def test_scope_call_counts_calls_in_order(sqlite_backend: Backend, outbox: Outbox) -> None:
    ledger = sqlite_backend.ledger()
    once = OnceOnly(ledger=ledger, tools={"ping": {"scope": "call"}})

    def ping(who: str) -> str:
        outbox.send(who, "ping")
        return "pong"

    @once.node
    def pings(state: State) -> State:
        once.call(ping, "ops")  # the same call twice in one node: two actions, by order
        once.call(ping, "ops")
        return {"answer": interrupt("done?")}

    with sqlite_backend.saver() as saver:
        graph = one_node_graph(pings, saver)
        graph.invoke({"amount": 1}, config())
        graph.invoke(Command(resume="yes"), config())
    assert len(outbox) == 2
    assert len(ledger.effects("thread-1")) == 2


def test_effects_inside_a_node_belong_to_the_thread(
    sqlite_backend: Backend, outbox: Outbox
) -> None:
    ledger = sqlite_backend.ledger()
    once = OnceOnly(ledger=ledger)

    @c4a.effect(name="notify", ledger=ledger)
    def notify(to: str) -> str:
        return outbox.send(to, "hello")

    @once.node
    def node(state: State) -> State:
        notify("ann@x")
        return {"answer": interrupt("ok?")}

    with sqlite_backend.saver() as saver:
        graph = one_node_graph(node, saver)
        graph.invoke({"amount": 1}, config())
        graph.invoke(Command(resume="ok"), config())
    assert len(outbox) == 1
    assert [r.run_id for r in ledger.effects()] == ["thread-1"]


def test_call_outside_a_decorated_node_is_refused(sqlite_backend: Backend) -> None:
    once = OnceOnly(ledger=sqlite_backend.ledger())

    def charge_card(amount: int) -> str:
        return "never"

    with pytest.raises(c4a.ConfigurationError, match=r"@once\.node"):
        once.call(charge_card, 5)


@pytest.mark.slow
@pytest.mark.parametrize(("mode", "charges"), [("plain", 2), ("once", 1)])
def test_node_killed_after_acting_then_resumed(
    sqlite_backend: Backend, outbox: Outbox, mode: str, charges: int
) -> None:
    env = sqlite_backend.env(LG_MODE=mode, LG_THREAD="thread-1", LG_OUTBOX=str(outbox.path))
    assert child("node_child.py", "start", env={**env, "LG_CRASH": "after"}).killed
    assert len(outbox) == 1
    resumed = child("node_child.py", "resume", env=env)
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.report == {"amount": 5, "receipt": "receipt-5"}
    assert len(outbox) == charges
