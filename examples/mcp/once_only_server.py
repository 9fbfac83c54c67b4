"""An MCP server whose tools/call happens once per logical call, even when the client retries.

Runs server and client in one process (the SDK's in-memory pair): the client sends the call, then
sends it again as if the first answer had been lost. The email goes out once; the retry gets the
first answer back. A read-only tool (readOnlyHint) runs every time.
"""

from __future__ import annotations

import uuid

import anyio
from mcp import Client
from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult, TextContent, ToolAnnotations

import call4agents as c4a
from call4agents_mcp import OnceOnly, call_tool

c4a.init()  # sqlite:///.c4a/ledger.db, or $CALL4AGENTS_URL
server = MCPServer("mail", middleware=[OnceOnly()])
outbox: list[str] = []


@server.tool()
def send_email(to: str, body: str) -> str:
    """Send an email."""
    # Forward c4a.current().idempotency_key to a provider that honours one, as a second guard.
    outbox.append(to)
    return f"message #{len(outbox)} to {to}"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def sent_count() -> int:
    """How many emails went out."""
    return len(outbox)


def text(result: CallToolResult) -> str:
    block = result.content[0]
    return block.text if isinstance(block, TextContent) else str(block)


async def main() -> None:
    # The run id is what a resumed agent would reuse (a ticket id); fresh here, to start clean.
    async with Client(server) as client, c4a.run(f"ticket-{uuid.uuid4().hex[:6]}"):
        args = {"to": "bob@example.com", "body": "Your refund is on its way"}
        first = await call_tool(client, "send_email", args)
        retry = await call_tool(client, "send_email", args)  # same run + arguments = same key
        outcome = (retry.meta or {}).get("io.call4agents/outcome", {}).get("outcome")
        print(f"first call: {text(first)}")
        print(f"retry:      {text(retry)} ({outcome})")
        print(f"emails sent: {text(await client.call_tool('sent_count', {}))}")


anyio.run(main)
