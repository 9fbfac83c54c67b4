"""A stdio MCP server for the Agents SDK tests: it records the idempotency key of every call.

Usage: mcp_server.py LOG_FILE. Each ``tools/call`` appends ``{"tool", "key"}`` to LOG_FILE; a call
whose key was seen before gets the first result and ``send_email`` does not run again, the way a
server with ``call4agents_mcp.OnceOnly`` answers a repeat.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from mcp.server.context import ServerRequestContext
from mcp.server.mcpserver import MCPServer

KEY = "io.call4agents/idempotency-key"
log = Path(sys.argv[1])
answered: dict[str, Any] = {}
sent: list[str] = []


async def record_key(ctx: ServerRequestContext[Any, Any], call_next: Any) -> Any:
    if ctx.method != "tools/call":
        return await call_next(ctx)
    params = ctx.params or {}
    key = (params.get("_meta") or {}).get(KEY)
    with log.open("a", encoding="utf-8") as f:
        f.write(json.dumps({"tool": params.get("name"), "key": key}) + "\n")
    if key is not None and key in answered:
        return answered[key]
    result = await call_next(ctx)
    if key is not None:
        answered[key] = result
    return result


server = MCPServer("mail", middleware=[record_key])


@server.tool()
def send_email(to: str, body: str) -> str:
    """Send an email."""
    sent.append(to)
    return f"email {len(sent)} sent to {to}"


if __name__ == "__main__":
    server.run("stdio")
