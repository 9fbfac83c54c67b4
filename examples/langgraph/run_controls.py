"""Run controls on a LangChain agent: a budget that ends the run, a hand-off, an undo.

Offline, with LangChain's fake chat model; its replies report token usage as a real model's do.

1. A budget of 4 model requests on the thread: from half of it on, the model's system message
   carries a note to wrap up, and the fifth request is never sent: the run ends with
   c4a.BudgetExceeded, recorded in the ledger. The tokens each reply reports are priced too.
2. A tool escalates (a charge too large for an agent): the run ends with c4a.Escalated, whose
   hand-off lists exactly what was done already.
3. The escalated thread is undone: each charge is refunded once, newest first.
"""

from __future__ import annotations

import uuid
from typing import Any

from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.messages.ai import UsageMetadata
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver

import call4agents as c4a
from call4agents_langgraph import OnceOnly

ledger = c4a.init()
refunds: list[str] = []


@tool
def send_update(to: str) -> str:
    """Send a customer an update."""
    return f"update sent to {to}"


@tool
def charge(customer: str, amount: int) -> dict[str, Any]:
    """Charge a customer."""
    if amount > 100:
        c4a.escalate(
            "charges over 100 need a person",
            what_remains=[f"charge {customer} {amount} once a person approved it"],
            blocking_fact=f"the charge is {amount}",
        )
    return {"charge_id": f"ch_{customer}_{amount}", "amount": amount}


def refund(result: dict[str, Any], *, customer: str, amount: int) -> None:
    refunds.append(result["charge_id"])  # your payment provider's refund of that charge


class OfflineModel(GenericFakeChatModel):
    """Replies from a list, and keeps the system message of every request it was sent."""

    systems: list[str]

    def bind_tools(self, tools: Any, **kwargs: Any) -> OfflineModel:
        return self

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> Any:
        self.systems.append(str(messages[0].content) if messages[0].type == "system" else "")
        return super()._generate(messages, *args, **kwargs)


def call(name: str, **args: Any) -> AIMessage:
    tool_call = {"name": name, "args": args, "id": f"call_{uuid.uuid4().hex[:8]}"}
    usage = UsageMetadata(input_tokens=900, output_tokens=100, total_tokens=1000)
    return AIMessage("", tool_calls=[tool_call], usage_metadata=usage)


budget = c4a.Budget(max_model_requests=4, max_cost=1.0, token_prices=(3.0, 15.0), soft=0.5)
once = OnceOnly(budget=budget, tools={"charge": {"undo": refund}})


def agent(replies: list[AIMessage]) -> tuple[Any, OfflineModel]:
    model = OfflineModel(messages=iter(replies), systems=[])
    graph = create_agent(
        model,
        [send_update, charge],
        system_prompt="You keep customers posted.",
        middleware=[once],
        checkpointer=InMemorySaver(),
    )
    return graph, model


# 1. The budget: the model keeps sending updates until its fifth request is refused.
graph, model = agent([call("send_update", to=f"customer {n}") for n in range(1, 7)])
thread = f"ticket-{uuid.uuid4().hex[:6]}"
config: Any = {"configurable": {"thread_id": thread}}
try:
    graph.invoke({"messages": [HumanMessage("Keep them posted.")]}, config)
except c4a.BudgetExceeded as exc:
    print(f"budget: ended by its {exc.reason} ({exc.detail}); the model got {len(model.systems)}")
told = [s for s in model.systems if "Note from the run's budget" in s]
print(f"the model was told to wrap up in {len(told)} of them")
with c4a.run(thread, budget=budget):
    spent = c4a.budget_usage()
print(f"tokens {spent.input_tokens} in, {spent.output_tokens} out; cost {spent.cost:.4f}")
status = ledger.run_status(thread)
assert status is not None
print(f"recorded ending: {status.status}")

# 2. Escalation from inside a tool: two small charges, then one a person must approve.
charges = [call("charge", customer=name, amount=n) for name, n in [("ann", 40), ("bob", 60)]]
graph, model = agent([*charges, call("charge", customer="cy", amount=500), AIMessage("Charged.")])
thread = f"ticket-{uuid.uuid4().hex[:6]}"
config = {"configurable": {"thread_id": thread}}
try:
    graph.invoke({"messages": [HumanMessage("Charge this month's orders.")]}, config)
except c4a.Escalated as exc:
    handoff = exc.handoff
    print(f"escalated: {handoff.reason}")
    print("already done:", [f"{d['args']['customer']} {d['args']['amount']}" for d in handoff.done])
    print("remains:", handoff.what_remains)

# 3. Undo the escalated thread: newest first, each refund once even if undo runs again.
report = ledger.undo(thread)
print(f"undo: {report.status}; refunds {refunds}")
print(f"undo again: {[item.outcome for item in ledger.undo(thread).items]}; refunds {refunds}")
