"""A create_agent child for the LangGraph crash tests, SIGKILLed at a chosen moment.

Usage: agent_child.py STEP, everything else from environment variables. STEP is "start" (invoke
with the user's message), "resume" (invoke(None, config)) or "retry" (the app sends the same
message again, as it must when durability="exit" saved nothing before the crash).
  LG_MODE       plain | once          without or with OnceOnly
  LG_SAVER      sqlite | postgres     the checkpointer
  LG_CKPT       the SQLite file or the PostgreSQL conninfo of the checkpoints
  LG_THREAD     thread id
  LG_OUTBOX     the "provider": one line per delivered email, fsynced, outside the ledger
  LG_CRASH      none | after | inside   SIGKILL after the tool returned (and its result was
                                        recorded) but before the checkpoint, or inside the tool
  LG_DURABILITY sync | exit
  LG_ASYNC      1 to run the async graph (ainvoke, async checkpointer, async tool)
  LG_EMAILS     comma-separated recipients, one tool call each in one model turn
  LG_GRAPH      agent (create_agent, default) | toolnode (a hand-built StateGraph whose ToolNode
                takes OnceOnly's wrap_tool_call / awrap_tool_call)
  LG_APPROVAL   1 to make send_email need a person's approval; STEP "answer" then resumes the
                pause with the decision in LG_DECISION (JSON, HumanInTheLoopMiddleware's shape)
  LG_WRAP       1 to wrap the checkpointer in LedgerCheckpointer
  LG_BREAK      1 to stop before the tools node (interrupt_before), so "start" saves a checkpoint
                even with durability="exit" and the tool runs on a later invoke(None, config)
  LG_EDIT_TO    for STEP "edit": the recipient the paused call is edited to (update_state), on
                the checkpoint LG_EDIT_AT (a checkpoint id, to fork an earlier state) or the last
STEP "where" prints the id of the thread's last checkpoint.
The ledger comes from C4A_TEST_URL / C4A_TEST_SCHEMA. Prints the tool messages as JSON.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sqlite3
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

from fake_model import ScriptedModel
from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import Command

import call4agents as c4a
from call4agents_langgraph import LedgerCheckpointer, OnceOnly

step = sys.argv[1]
env = os.environ
mode, saver_kind, ckpt = env["LG_MODE"], env["LG_SAVER"], env["LG_CKPT"]
crash, durability = env.get("LG_CRASH", "none"), env.get("LG_DURABILITY", "sync")
use_async = env.get("LG_ASYNC") == "1"
outbox = Path(env["LG_OUTBOX"])
emails = env.get("LG_EMAILS", "bob@example.com").split(",")
config: Any = {"configurable": {"thread_id": env["LG_THREAD"]}}

c4a.init(env["C4A_TEST_URL"], schema=env.get("C4A_TEST_SCHEMA") or None, lease=600, wait=30)


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def deliver(to: str, body: str) -> str:
    with outbox.open("a") as f:
        f.write(json.dumps({"to": to, "body": body, "pid": os.getpid()}) + "\n")
        f.flush()
        os.fsync(f.fileno())
    if crash == "inside":
        die()
    return f"sent to {to}"


@tool("send_email")
def send_email_sync(to: str, body: str) -> str:
    """Send an email."""
    return deliver(to, body)


@tool("send_email")
async def send_email_async(to: str, body: str) -> str:
    """Send an email."""
    return deliver(to, body)


class KillAfterTool(AgentMiddleware):
    """Listed first, so outermost: the tool ran and OnceOnly recorded its result, but LangGraph
    has not saved the tools node's writes yet."""

    def wrap_tool_call(self, request: Any, handler: Any) -> Any:
        result = handler(request)
        if crash == "after":
            die()
        return result

    async def awrap_tool_call(self, request: Any, handler: Any) -> Any:
        result = await handler(request)
        if crash == "after":
            die()
        return result


def build(saver: Any) -> Any:
    if env.get("LG_WRAP") == "1":
        saver = LedgerCheckpointer(saver)
    model = ScriptedModel(
        tool_calls=[
            ("send_email", {"to": to, "body": "Your refund is on its way"}) for to in emails
        ]
    )
    middleware: list[Any] = [KillAfterTool()]
    if mode == "once":
        approval = {"send_email": {"approval": True}} if env.get("LG_APPROVAL") == "1" else {}
        middleware.append(OnceOnly(tools=approval))
    tools = [send_email_async if use_async else send_email_sync]
    stop = ["tools"] if env.get("LG_BREAK") == "1" else None
    return create_agent(
        model, tools, middleware=middleware, checkpointer=saver, interrupt_before=stop
    )


def build_toolnode_graph(model: ScriptedModel, saver: Any) -> Any:
    once, killer = OnceOnly(), KillAfterTool()

    def wrap(request: Any, handler: Any) -> Any:
        inner = (lambda r: once.wrap_tool_call(r, handler)) if mode == "once" else handler
        return killer.wrap_tool_call(request, inner)

    async def awrap(request: Any, handler: Any) -> Any:
        async def inner(r: Any) -> Any:
            return await (once.awrap_tool_call(r, handler) if mode == "once" else handler(r))

        return await killer.awrap_tool_call(request, inner)

    tool = send_email_async if use_async else send_email_sync
    builder = StateGraph(MessagesState)
    builder.add_node("agent", lambda state: {"messages": [model.invoke(state["messages"])]})
    builder.add_node("tools", ToolNode([tool], wrap_tool_call=wrap, awrap_tool_call=awrap))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    stop = ["tools"] if env.get("LG_BREAK") == "1" else None
    return builder.compile(checkpointer=saver, interrupt_before=stop)


@contextlib.contextmanager
def sync_saver() -> Iterator[Any]:
    if saver_kind == "sqlite":
        from langgraph.checkpoint.sqlite import SqliteSaver

        conn = sqlite3.connect(ckpt, check_same_thread=False)
        try:
            yield SqliteSaver(conn)
        finally:
            conn.close()
    else:
        from langgraph.checkpoint.postgres import PostgresSaver

        with PostgresSaver.from_conn_string(ckpt) as saver:
            saver.setup()
            yield saver


@contextlib.asynccontextmanager
async def async_saver() -> AsyncIterator[Any]:
    if saver_kind == "sqlite":
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

        async with AsyncSqliteSaver.from_conn_string(ckpt) as saver:
            yield saver
    else:
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

        async with AsyncPostgresSaver.from_conn_string(ckpt) as saver:
            await saver.setup()
            yield saver


def report(out: Any) -> None:
    messages = out.value.get("messages", [])
    tools = [
        {
            "name": m.name,
            "status": m.status,
            "content": m.content,
            "outcome": m.response_metadata.get("call4agents", {}).get("outcome"),
        }
        for m in messages
        if isinstance(m, ToolMessage)
    ]
    paused = [i.value for i in out.interrupts]
    print(json.dumps({"tool_messages": tools, "interrupts": paused}))


def inputs() -> Any:
    if step == "resume":
        return None
    if step == "answer":
        return Command(resume=json.loads(env["LG_DECISION"]))
    return {"messages": [HumanMessage("Tell the customers about their refunds")]}


def edit(agent: Any) -> None:
    """Change the recipient of the paused call in the saved state, keeping its tool call id."""
    at = env.get("LG_EDIT_AT")
    fork = {"configurable": {**config["configurable"], "checkpoint_ns": "", "checkpoint_id": at}}
    state = agent.get_state(fork if at else config)
    where = state.config
    last = state.values["messages"][-1]
    calls = [{**c, "args": {**c["args"], "to": env["LG_EDIT_TO"]}} for c in last.tool_calls]
    agent.update_state(where, {"messages": [last.model_copy(update={"tool_calls": calls})]})


def main_sync() -> None:
    with sync_saver() as saver:
        agent = build(saver)
        if step == "edit":
            edit(agent)
        elif step == "where":
            print(agent.get_state(config).config["configurable"]["checkpoint_id"])
        else:
            report(agent.invoke(inputs(), config, durability=durability, version="v2"))


async def main_async() -> None:
    async with async_saver() as saver:
        report(await build(saver).ainvoke(inputs(), config, durability=durability, version="v2"))


if use_async:
    asyncio.run(main_async())
else:
    main_sync()
