"""A LangChain agent whose tool calls run once per thread, even when LangGraph runs them again.

Offline: LangChain's fake chat model stands in for the LLM. The agent emails Bob, then we time
travel to the checkpoint before the tools step, which makes LangGraph run the tool again: the
ledger returns the recorded result instead. Run it twice in one folder: the second process finds
thread "ticket-1234" already emailed Bob, and sends nothing.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.checkpoint.sqlite import SqliteSaver

import call4agents as c4a
from call4agents_langgraph import OnceOnly

c4a.init()  # sqlite:///.c4a/ledger.db in the current folder, or $CALL4AGENTS_URL
outbox: list[str] = []


@tool
def send_email(to: str, body: str) -> str:
    """Email a customer."""
    outbox.append(to)  # stands in for a mail provider's API call
    return f"sent to {to} (idempotency key {c4a.current().idempotency_key[:12]}...)"


class OfflineModel(GenericFakeChatModel):
    def bind_tools(self, tools: Any, **kwargs: Any) -> OfflineModel:
        return self


email = {"to": "bob@example.com", "body": "Your refund is on its way"}
call = AIMessage("", tool_calls=[{"name": "send_email", "args": email, "id": "call_1"}])
model = OfflineModel(messages=iter([call, AIMessage("Done."), AIMessage("Done.")]))

checkpoints = SqliteSaver(sqlite3.connect("checkpoints.db", check_same_thread=False))
agent = create_agent(model, [send_email], checkpointer=checkpoints, middleware=[OnceOnly()])
config: Any = {"configurable": {"thread_id": "ticket-1234"}}  # the thread is the run

out = agent.invoke({"messages": [HumanMessage("Tell Bob about his refund")]}, config)
print("tool said:", out["messages"][-2].content)

# Time travel: run the thread again from the checkpoint before its first tools step.
before = [s for s in agent.get_state_history(config) if s.next == ("tools",)][-1]
again = agent.invoke(None, before.config)
replayed = again["messages"][-2]
print("replayed:", replayed.content, f"({replayed.response_metadata['call4agents']['outcome']})")
print(f"emails sent by this process: {len(outbox)}")
