"""A child process for the run-control tests: act, undo (killed at a chosen moment), create.

Usage: run_controls_child.py MODE RUN_ID WORLD [POINT]

WORLD is a file outside the ledger: one line per thing that happened in the outside world
("charge 3", "refund 3", "ticket <title>"), written and fsynced before the tool returns.

    act           charge 1..4 in run RUN_ID (tool "charge", undo "refund")
    undo          ledger.undo(RUN_ID); prints the report as JSON. POINT:
                    before_third_undo   SIGKILL as the third undo's intent is about to be written
                    inside_third_undo   SIGKILL inside the third undo, after it refunded
    ticket        open_ticket("Refund for order 7") with read-before-write. POINT:
                    after_create        SIGKILL after the ticket exists, before the result is kept
                    after_intent        SIGKILL after the intent, before the ticket exists
    budget        charge each amount in $AMOUNTS (comma-separated) under
                  Budget(max_tool_calls=$MAX_CALLS, deadline=$DEADLINE if set); prints one
                  outcome per amount as JSON.
                  POINT kill_after_N: SIGKILL once N charges are done (0: as the run starts)
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

from sqlalchemy import event

import call4agents as c4a

mode, run_id, world = sys.argv[1], sys.argv[2], Path(sys.argv[3])
point = sys.argv[4] if len(sys.argv) > 4 else ""
ledger = c4a.init(
    os.environ["C4A_TEST_URL"], schema=os.environ.get("C4A_TEST_SCHEMA") or None, lease=600
)


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def happen(line: str) -> None:
    with world.open("a") as f:
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())


def lines() -> list[str]:
    return world.read_text().splitlines() if world.exists() else []


undos_started = 0


def refund(result: dict[str, Any], *, amount: int) -> dict[str, Any]:
    global undos_started
    undos_started += 1
    assert result == {"charge_id": f"ch_{amount}", "amount": amount}  # the recorded result
    happen(f"refund {amount}")
    if point == "inside_third_undo" and undos_started == 3:
        die()
    return {"refund_id": f"re_{amount}", "key": c4a.current().idempotency_key}


@c4a.effect(name="charge", undo=refund)
def charge(amount: int) -> dict[str, Any]:
    happen(f"charge {amount}")
    return {"charge_id": f"ch_{amount}", "amount": amount}


def find_ticket(title: str) -> dict[str, str] | None:
    # The "tracker" search: tickets are lines "ticket <title>" in the world file.
    titles = [line.removeprefix("ticket ") for line in lines() if line.startswith("ticket ")]
    found = c4a.find_marked(titles)
    return {"title": found} if found is not None else None


@c4a.effect(name="open_ticket", find_existing=find_ticket)
def open_ticket(title: str) -> dict[str, str]:
    if point == "after_intent":
        die()
    marked = f"{title} {c4a.key_marker()}"
    happen(f"ticket {marked}")
    if point == "after_create":
        die()
    return {"title": marked}


intents = 0


@event.listens_for(ledger.engine, "before_cursor_execute")
def _before(conn: Any, cursor: Any, statement: str, params: Any, context: Any, many: bool) -> None:
    global intents
    inserts = "INSERT INTO" in statement  # alone, or in PostgreSQL's one-statement claim
    if point == "before_third_undo" and inserts and "undo:charge" in repr(params):
        intents += 1
        if intents == 3:
            die()


with c4a.run(run_id):
    if mode == "act":
        for amount in (1, 2, 3, 4):
            charge(amount)
    elif mode == "ticket":
        print(json.dumps(open_ticket("Refund for order 7")))
if mode == "budget":
    outcomes: list[str] = []
    deadline = float(os.environ["DEADLINE"]) if os.environ.get("DEADLINE") else None
    budget = c4a.Budget(max_tool_calls=int(os.environ["MAX_CALLS"]), deadline=deadline)
    with c4a.run(run_id, budget=budget):
        if point == "kill_after_0":
            die()
        for amount in [int(a) for a in os.environ["AMOUNTS"].split(",")]:
            try:
                charge(amount)
                outcomes.append("ok")
            except c4a.BudgetExceeded as exc:
                outcomes.append(f"refused:{exc.reason}")
            if point == f"kill_after_{len(outcomes)}":
                die()
    print(json.dumps(outcomes))
if mode == "undo":
    print(json.dumps(ledger.undo(run_id).as_dict()))
