"""A refund that needs a person's "yes", asked through a LangGraph interrupt.

The pause carries exactly the call that will run and its ledger ticket, in the same shape as
HumanInTheLoopMiddleware's per-call requests, so a UI built for that works. The reviewer edits
the amount: that is a "yes" to the edited call only, and only the edited call runs.
"""

from __future__ import annotations

import os
import uuid
from typing import Any

from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

import call4agents as c4a
from call4agents_langgraph import OnceOnly

os.environ.setdefault("CALL4AGENTS_SECRET", "example-only-secret-" + "x" * 32)
ledger = c4a.init()
refunds: list[tuple[str, int]] = []


@tool
def refund(order: str, amount: int) -> str:
    """Refund an order."""
    refunds.append((order, amount))
    return f"refunded {amount} EUR on {order}"


class OfflineModel(GenericFakeChatModel):
    def bind_tools(self, tools: Any, **kwargs: Any) -> OfflineModel:
        return self


ask = {"name": "refund", "args": {"order": "A-17", "amount": 120}, "id": "call_1"}
model = OfflineModel(messages=iter([AIMessage("", tool_calls=[ask]), AIMessage("Done.")]))
once = OnceOnly(tools={"refund": {"kind": "irreversible", "approval": True}})
agent = create_agent(model, [refund], checkpointer=InMemorySaver(), middleware=[once])
config: Any = {"configurable": {"thread_id": f"ticket-{uuid.uuid4().hex[:6]}"}}

paused = agent.invoke({"messages": [HumanMessage("Refund order A-17")]}, config, version="v2")
[request] = paused.interrupts
value = request.value
print(f"paused: {value['name']} {value['args']} ticket {value['ticket']}")
print(f"refunds so far: {refunds}")

edit = {"name": "refund", "args": {"order": "A-17", "amount": 100}}
answer = {"type": "edit", "edited_action": edit, "by": "ann", "message": "policy cap is 100"}
done = agent.invoke(Command(resume=answer), config)
print("tool said:", done["messages"][-2].content.splitlines()[-1])
print(f"refunds made: {refunds}")
for ticket in ledger.approvals(config["configurable"]["thread_id"]):
    print(
        f"ticket {ticket.args}: {ticket.state}"
        + (f" by {ticket.decided_by}" if ticket.decided_by else "")
    )
