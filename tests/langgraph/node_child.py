"""A hand-built graph whose node charges a card, SIGKILLed right after the charge.

Usage: node_child.py STEP (start | resume); LG_MODE plain | once, LG_CRASH none | after,
LG_THREAD, LG_OUTBOX, LG_CKPT (an SQLite file); the ledger from C4A_TEST_URL / C4A_TEST_SCHEMA.
The node is re-run from its top on resume, as LangGraph does after a crash.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import sys
from pathlib import Path
from typing import Any

from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict

import call4agents as c4a
from call4agents_langgraph import OnceOnly

env = os.environ
step, mode, crash = sys.argv[1], env["LG_MODE"], env.get("LG_CRASH", "none")
outbox = Path(env["LG_OUTBOX"])
c4a.init(env["C4A_TEST_URL"], schema=env.get("C4A_TEST_SCHEMA") or None, lease=600, wait=30)
once = OnceOnly()


class State(TypedDict, total=False):
    amount: int
    receipt: str


def charge_card(amount: int) -> str:
    with outbox.open("a") as f:
        f.write(json.dumps({"amount": amount, "pid": os.getpid()}) + "\n")
        f.flush()
        os.fsync(f.fileno())
    return f"receipt-{amount}"


def pay(state: State) -> State:
    amount = state["amount"]
    receipt = once.call(charge_card, amount) if mode == "once" else charge_card(amount)
    if crash == "after":
        os.kill(os.getpid(), signal.SIGKILL)  # charged; the node's writes are not saved
    return {"receipt": receipt}


builder = StateGraph(State)
builder.add_node("pay", once.node(pay) if mode == "once" else pay)
builder.add_edge(START, "pay")
builder.add_edge("pay", END)
conn = sqlite3.connect(env["LG_CKPT"], check_same_thread=False)
graph = builder.compile(checkpointer=SqliteSaver(conn))
config: Any = {"configurable": {"thread_id": env["LG_THREAD"]}}
out = graph.invoke({"amount": 5} if step == "start" else None, config, durability="sync")
print(json.dumps(out))
