"""An OpenAI Agents SDK agent for the console's browser tests, run as its own process.

Usage: sdk_child.py STEP STATE_FILE OUTBOX. STEP "start" asks the bank agent to wire 500 to bob:
the wire needs a person's yes, so the run pauses and its state is saved to STATE_FILE. STEP
"resume" is the application going on once a person answered (in the console): it loads the
state, lets it continue and prints the tool outputs; the ledger's answer decides what runs. Each
real wire appends a line to OUTBOX. The ledger comes from C4A_TEST_URL / C4A_TEST_SCHEMA.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

from agents import Agent, Runner, RunState, function_tool, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call

import call4agents as c4a
from call4agents_openai_agents import OnceOnly

set_tracing_disabled(True)
step, state_file, outbox = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
c4a.init(os.environ["C4A_TEST_URL"], schema=os.environ.get("C4A_TEST_SCHEMA") or None)


@function_tool
def wire(to: str, amount: int) -> str:
    """Wire money to a payee."""
    with outbox.open("a", encoding="utf-8") as f:
        f.write(json.dumps({"to": to, "amount": amount}) + "\n")
    return f"wired {amount} to {to}"


def agent() -> Agent[Any]:
    steps = [
        [function_call("wire", json.dumps({"to": "bob", "amount": 500}), call_id="call_W")],
        [assistant_message("done")],
    ]
    if step == "resume":
        steps = steps[1:]
    bank = Agent(name="bank", model=ScriptedModel(steps), tools=[wire])
    return OnceOnly(tools={"wire": {"approval": True}}).wrap(bank)


async def main() -> dict[str, Any]:
    bank = agent()
    if step == "start":
        result = await Runner.run(bank, "pay bob", context={"call4agents_run_id": "sdk-run-1"})
        state_file.write_text(result.to_state().to_string())
        return {"paused": len(result.interruptions)}
    state = await RunState.from_string(bank, state_file.read_text())
    for item in state.get_interruptions():
        state.approve(item)  # the application goes on; the ledger holds the person's answer
    result = await Runner.run(bank, state)
    return {
        "outputs": [str(i.output) for i in result.new_items if i.type == "tool_call_output_item"]
    }


print(json.dumps(asyncio.run(main())))
