"""An MCP client that retries a tools/call with the same idempotency key.

    python examples/mcp/client.py http://127.0.0.1:8000/mcp

Each call opens a new connection, as a client does after a timeout or a restart. The key comes
from (run, tool, arguments), so the retry carries the same key and gets the first answer.
"""

from __future__ import annotations

import sys
import uuid

import anyio
from mcp import Client
from mcp.types import CallToolResult, TextContent

import call4agents as c4a
from call4agents_mcp import call_tool

ARGS = {"to": "bob@example.com", "body": "Your refund is on its way"}


def text(result: CallToolResult) -> str:
    block = result.content[0]
    return block.text if isinstance(block, TextContent) else str(block)


RUN = f"ticket-{uuid.uuid4().hex[:6]}"  # the id a resumed agent would reuse


async def send(url: str) -> CallToolResult:
    async with Client(url) as client, c4a.run(RUN):
        return await call_tool(client, "send_email", ARGS)


async def main(url: str) -> None:
    first = await send(url)
    retry = await send(url)  # as if the first answer never arrived
    outcome = (retry.meta or {}).get("io.call4agents/outcome", {}).get("outcome", "ran")
    print(f"first call: {text(first)}")
    print(f"retry:      {text(retry)} ({outcome})")
    async with Client(url) as client:
        print(f"emails sent: {text(await client.call_tool('sent_count', {}))}")


anyio.run(main, sys.argv[1])
