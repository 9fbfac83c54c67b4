"""A worker that resumes a saved, approved ``RunState`` of the bank agent.

The wire tool asks for approval the SDK's own way (``needs_approval=True``); with OnceOnly that
question and its answer are bound to the call in the ledger.

Usage: approval_child.py MODE STATE_FILE OUTBOX   (MODE: plain | once)

Prints ``{"outputs": [...tool outputs...]}``. The ledger comes from C4A_TEST_URL/C4A_TEST_SCHEMA;
the run id travels inside the saved state (a dict context with ``call4agents_run_id``).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

from agents import Agent, FunctionTool, Runner, RunState, function_tool, set_tracing_disabled
from agents.items import TResponseOutputItem
from agents.testing import ScriptedModel, assistant_message

set_tracing_disabled(True)


def wire_tool(outbox: Path, *, needs_approval: bool = False) -> FunctionTool:
    @function_tool(needs_approval=needs_approval)
    def wire(to: str, amount: int) -> str:
        """Wire money to a payee."""
        with outbox.open("a", encoding="utf-8") as f:
            f.write(json.dumps({"to": to, "amount": amount, "pid": os.getpid()}) + "\n")
            f.flush()
            os.fsync(f.fileno())
        return f"wired {amount} to {to}"

    return wire


def bank_agent(
    outbox: Path, *steps: list[TResponseOutputItem], needs_approval: bool = False
) -> Agent[Any]:
    tools: list[Any] = [wire_tool(outbox, needs_approval=needs_approval)]
    return Agent(name="bank", model=ScriptedModel(list(steps)), tools=tools)


async def resume(mode: str, state_file: Path, outbox: Path) -> list[str]:
    agent = bank_agent(outbox, [assistant_message("done")], needs_approval=True)
    if mode == "once":
        import call4agents as c4a
        from call4agents_openai_agents import OnceOnly

        c4a.init(os.environ["C4A_TEST_URL"], schema=os.environ.get("C4A_TEST_SCHEMA") or None)
        agent = OnceOnly().wrap(agent)
    state = await RunState.from_string(agent, state_file.read_text())
    result = await Runner.run(agent, state)
    return [str(i.output) for i in result.new_items if i.type == "tool_call_output_item"]


if __name__ == "__main__":
    mode, state_file, outbox = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
    print(json.dumps({"outputs": asyncio.run(resume(mode, state_file, outbox))}))
