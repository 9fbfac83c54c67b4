"""A create_agent child with a budget, SIGKILLed mid-run, then resumed from its checkpoint.

Usage: budget_child.py STEP; STEP is "start" (invoke with the user's message) or "resume"
(invoke(None, config)). Everything else comes from environment variables:
  LG_SAVER, LG_CKPT   the checkpointer (sqlite | postgres) and its file or conninfo
  LG_THREAD           thread id
  LG_OUTBOX           one line per delivered email, fsynced, outside the ledger
  MAX_CALLS           Budget(max_tool_calls=...), or
  MAX_REQUESTS        Budget(max_model_requests=...)
  LG_KILL_AFTER       SIGKILL once this many emails were delivered and recorded, before
                      LangGraph saves the step
The model mails ann, bob, cy and dee, one per turn. Prints how the run ended as JSON.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from fake_model import StepModel
from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import HumanMessage
from langchain_core.tools import tool

import call4agents as c4a
from call4agents_langgraph import OnceOnly

step = sys.argv[1]
env = os.environ
outbox = Path(env["LG_OUTBOX"])
kill_after = int(env.get("LG_KILL_AFTER", "0"))
config: Any = {"configurable": {"thread_id": env["LG_THREAD"]}}

c4a.init(env["C4A_TEST_URL"], schema=env.get("C4A_TEST_SCHEMA") or None, lease=600, wait=30)


def delivered() -> int:
    return len(outbox.read_text().splitlines()) if outbox.exists() else 0


@tool
def send_email(to: str, body: str) -> str:
    """Email a customer."""
    with outbox.open("a") as f:
        f.write(json.dumps({"to": to, "body": body, "pid": os.getpid()}) + "\n")
        f.flush()
        os.fsync(f.fileno())
    return f"sent to {to}"


class KillAfter(AgentMiddleware):
    """Listed first, so outermost: OnceOnly has recorded the call when this sees it return."""

    def wrap_tool_call(self, request: Any, handler: Any) -> Any:
        result = handler(request)
        if kill_after and delivered() >= kill_after:
            os.kill(os.getpid(), signal.SIGKILL)
        return result


@contextlib.contextmanager
def saver() -> Iterator[Any]:
    if env["LG_SAVER"] == "sqlite":
        from langgraph.checkpoint.sqlite import SqliteSaver

        conn = sqlite3.connect(env["LG_CKPT"], check_same_thread=False)
        try:
            yield SqliteSaver(conn)
        finally:
            conn.close()
    else:
        from langgraph.checkpoint.postgres import PostgresSaver

        with PostgresSaver.from_conn_string(env["LG_CKPT"]) as found:
            found.setup()
            yield found


def budget() -> c4a.Budget:
    if "MAX_CALLS" in env:
        return c4a.Budget(max_tool_calls=int(env["MAX_CALLS"]))
    return c4a.Budget(max_model_requests=int(env["MAX_REQUESTS"]))


people = ["ann@x", "bob@x", "cy@x", "dee@x"]
model = StepModel(calls=[("send_email", {"to": to, "body": "Your refund"}) for to in people])
with saver() as checkpoints:
    agent = create_agent(
        model,
        [send_email],
        middleware=[KillAfter(), OnceOnly(budget=budget())],
        checkpointer=checkpoints,
    )
    inputs = None if step == "resume" else {"messages": [HumanMessage("mail everyone")]}
    try:
        agent.invoke(inputs, config, durability="sync")
        print(json.dumps({"ended": None}))
    except c4a.BudgetExceeded as exc:
        print(json.dumps({"ended": exc.reason, "detail": exc.detail}))
