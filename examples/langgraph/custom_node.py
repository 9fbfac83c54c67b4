"""Side effects inside a hand-built graph: a custom node and a ToolNode, both once per thread.

LangGraph runs a node again from its top when it resumes after interrupt(), so a card charged
before the question would be charged twice. Inside @once.node, once.call(...) records it, and
the re-run gets the recorded receipt. The ToolNode takes OnceOnly's wrappers directly.
"""

from __future__ import annotations

import uuid
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode
from langgraph.types import Command, interrupt

import call4agents as c4a
from call4agents_langgraph import OnceOnly

c4a.init()
once = OnceOnly()
charges: list[int] = []
emails: list[str] = []


class State(MessagesState, total=False):
    amount: int
    receipt: str


def charge_card(amount: int) -> str:
    charges.append(amount)  # stands in for a payment provider's API call
    return f"receipt-{len(charges)}"


@once.node
def checkout(state: State) -> dict[str, Any]:
    receipt = once.call(charge_card, state["amount"])
    if interrupt(f"charged {state['amount']} ({receipt}); email the receipt?") != "yes":
        return {"receipt": receipt}
    call = {"name": "email_receipt", "args": {"receipt": receipt}, "id": "call_1"}
    return {"receipt": receipt, "messages": [AIMessage("", tool_calls=[call])]}


@tool
def email_receipt(receipt: str) -> str:
    """Email the receipt to the customer."""
    emails.append(receipt)
    return f"emailed {receipt}"


tools = ToolNode(
    [email_receipt], wrap_tool_call=once.wrap_tool_call, awrap_tool_call=once.awrap_tool_call
)
builder = StateGraph(State)
builder.add_node("checkout", checkout)
builder.add_node("tools", tools)
builder.add_edge(START, "checkout")
builder.add_edge("checkout", "tools")
builder.add_edge("tools", END)
graph = builder.compile(checkpointer=InMemorySaver())
config: Any = {"configurable": {"thread_id": f"order-{uuid.uuid4().hex[:6]}"}}

paused = graph.invoke({"amount": 42, "messages": [HumanMessage("buy")]}, config, version="v2")
print("asked:", paused.interrupts[0].value)
done = graph.invoke(Command(resume="yes"), config)  # checkout runs again from its top
print("receipt:", done["receipt"], "|", done["messages"][-1].content)
# Time travel to the checkpoint before the tools step: the receipt is not emailed again.
before_tools = next(s for s in graph.get_state_history(config) if s.next == ("tools",))
graph.invoke(None, before_tools.config)
print(f"cards charged: {charges}; receipts emailed: {emails}")
