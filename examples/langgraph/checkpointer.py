"""LedgerCheckpointer: each checkpoint names the actions done since the one before, and deleting
a thread deletes its ledger records too (never while one of its actions is in doubt).

The ledger and the checkpoints share one SQLite file here; a PostgreSQL database works the same.
"""

from __future__ import annotations

import sqlite3
import uuid
from typing import Any

from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.checkpoint.sqlite import SqliteSaver

import call4agents as c4a
from call4agents_langgraph import LedgerCheckpointer, OnceOnly

ledger = c4a.init("sqlite:///agent.db")
checkpoints = LedgerCheckpointer(SqliteSaver(sqlite3.connect("agent.db", check_same_thread=False)))


@tool
def send_email(to: str, body: str) -> str:
    """Email a customer."""
    return f"sent to {to}"


class OfflineModel(GenericFakeChatModel):
    def bind_tools(self, tools: Any, **kwargs: Any) -> OfflineModel:
        return self


email = {"name": "send_email", "args": {"to": "bob@example.com", "body": "Hi"}, "id": "call_1"}
model = OfflineModel(messages=iter([AIMessage("", tool_calls=[email]), AIMessage("Done.")]))
agent = create_agent(model, [send_email], checkpointer=checkpoints, middleware=[OnceOnly()])
thread = f"ticket-{uuid.uuid4().hex[:6]}"
config: Any = {"configurable": {"thread_id": thread}}
agent.invoke({"messages": [HumanMessage("Email Bob")]}, config)

for state in reversed(list(agent.get_state_history(config))):
    done = [f"{a['tool']} ({a['state']})" for a in state.metadata["call4agents"]["actions"]]
    print(f"step {state.metadata['step']:>2} next={state.next}: {', '.join(done) or '-'}")

checkpoints.delete_thread(thread)
print(
    f"after delete_thread: {len(ledger.effects(thread))} ledger records, "
    f"{len(list(agent.get_state_history(config)))} checkpoints"
)
