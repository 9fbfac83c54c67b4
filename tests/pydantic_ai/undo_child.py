"""A child process that charges through a Pydantic AI agent, or undoes that conversation.

Usage: undo_child.py MODE CONVERSATION WORLD [inside_third_undo]

    act     the agent charges 1..4, one tool call per model step (tool "charge" with an undo)
    undo    ledger.undo(CONVERSATION) with the same OnceOnly (which registers the undo);
            prints the report as JSON. inside_third_undo: SIGKILL inside the third undo,
            after its refund happened.

WORLD is a file outside the ledger: one line per charge or refund, fsynced before returning.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

import call4agents as c4a
from call4agents_pydantic_ai import OnceOnly

mode, conversation, world = sys.argv[1], sys.argv[2], Path(sys.argv[3])
kill_inside_third = len(sys.argv) > 4 and sys.argv[4] == "inside_third_undo"
ledger = c4a.init(os.environ["C4A_TEST_URL"], schema=os.environ.get("C4A_TEST_SCHEMA") or None)


def happen(line: str) -> None:
    with world.open("a") as f:
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())


def charge(amount: int) -> dict[str, Any]:
    """Charge the customer."""
    happen(f"charge {amount}")
    return {"charge_id": f"ch_{amount}", "amount": amount}


undos = 0


def refund(result: dict[str, Any], *, amount: int) -> dict[str, str]:
    global undos
    undos += 1
    assert result == {"charge_id": f"ch_{amount}", "amount": amount}  # the recorded result
    happen(f"refund {amount}")
    if kill_inside_third and undos == 3:
        os.kill(os.getpid(), signal.SIGKILL)
    return {"refund_id": f"re_{amount}"}


def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    step = sum(isinstance(m, ModelResponse) for m in messages)
    if step == 4:
        return ModelResponse(parts=[TextPart("charged 1 to 4")])
    return ModelResponse(parts=[ToolCallPart("charge", {"amount": step + 1}, f"call-{step}")])


once = OnceOnly(tools={"charge": {"undo": refund}})
if mode == "act":
    agent = Agent(FunctionModel(respond), tools=[charge], capabilities=[once])
    print(agent.run_sync("charge the four orders", conversation_id=conversation).output)
else:
    report = ledger.undo(conversation)
    print(json.dumps(report.as_dict()))
