"""A child process: an MCP server with a budget, and a client charging through it.

Usage: run_controls_child.py RUN WORLD [POINT]

The server is ``MCPServer(middleware=[OnceOnly(identity=RUN, budget=Budget(max_tool_calls=
$MAX_CALLS))])``, so its actions are in run ``mcp:RUN``. The client (the SDK's in-memory client)
calls ``charge`` once per amount in $AMOUNTS (comma-separated), each with its own idempotency
key, and prints one outcome per amount as JSON: ``ok`` (ran now), ``replayed`` (the ledger's
answer), or ``<outcome>:<reason>`` for an error result. WORLD is a file outside the ledger with
one fsynced line per charge that really happened. POINT ``kill_after_N``: SIGKILL once N
answers are in.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import anyio
from mcp import Client
from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult

import call4agents as c4a
from call4agents_mcp import OnceOnly, call_tool

run, world = sys.argv[1], Path(sys.argv[2])
point = sys.argv[3] if len(sys.argv) > 3 else ""
c4a.init(os.environ["C4A_TEST_URL"], schema=os.environ.get("C4A_TEST_SCHEMA") or None, lease=600)
budget = c4a.Budget(max_tool_calls=int(os.environ["MAX_CALLS"]))
app = MCPServer("pay", middleware=[OnceOnly(identity=lambda ctx: run, budget=budget)])


@app.tool()
def charge(amount: int) -> dict[str, Any]:
    with world.open("a") as f:
        f.write(f"charge {amount}\n")
        f.flush()
        os.fsync(f.fileno())
    return {"charge_id": f"ch_{amount}"}


def outcome(result: CallToolResult) -> str:
    marker = (result.meta or {}).get("io.call4agents/outcome")
    if not result.is_error:
        return marker["outcome"] if marker else "ok"
    info = (result.meta or {})["io.call4agents/outcome"]
    return f"{info['outcome']}:{info.get('reason')}"


async def main() -> list[str]:
    outcomes: list[str] = []
    async with Client(app) as client:
        for amount in [int(a) for a in os.environ["AMOUNTS"].split(",")]:
            result = await call_tool(
                client, "charge", {"amount": amount}, key=f"charge-{amount}", raise_on_end=False
            )
            outcomes.append(outcome(result))
            if point == f"kill_after_{len(outcomes)}":
                os.kill(os.getpid(), signal.SIGKILL)
    return outcomes


print(json.dumps(anyio.run(main)))
