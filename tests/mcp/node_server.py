"""The example mail server's tools, with and without OnceOnly, for the Node.js clients' tests.

Usage: node_server.py MODE TRANSPORT OUTBOX
  MODE       "once" (OnceOnly, the ledger C4A_TEST_URL) or "bare" (the same tools, no ledger)
  TRANSPORT  "http" (streamable HTTP on 127.0.0.1, a free port, printed as "PORT <n>") or "stdio"
  OUTBOX     the file each side effect is appended to, one JSON line each (the outside world)

Besides examples/mcp/server.py's send_email and sent_count: charge_card raises for the card
"declined" (after nothing was charged), and refund needs a person's yes under OnceOnly. Tools
with a typed return have an outputSchema, which the clients check the results against.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from pathlib import Path
from typing import Any

import uvicorn
from mcp.server.mcpserver import Context, Image, MCPServer
from mcp.types import ToolAnnotations
from pydantic import BaseModel

import call4agents as c4a
from call4agents_mcp import OnceOnly

mode, transport, outbox = sys.argv[1], sys.argv[2], Path(sys.argv[3])
middleware: list[Any] = []
if mode == "once":
    c4a.init(os.environ["C4A_TEST_URL"], schema=os.environ.get("C4A_TEST_SCHEMA") or None)
    middleware.append(OnceOnly(tools={"refund": {"approval": True}}))
server = MCPServer("mail", middleware=middleware)


def deliver(**fields: Any) -> int:
    with outbox.open("a", encoding="utf-8") as f:
        f.write(json.dumps({**fields, "pid": os.getpid()}) + "\n")
    return len(outbox.read_text().splitlines())


class Receipt(BaseModel):
    charge_id: str
    amount: int


class Refund(BaseModel):
    refund_id: str
    order: str
    amount: int


@server.tool()
def send_email(to: str, body: str) -> str:
    """Send an email."""
    if mode == "bare":  # no ledger: c4a.current() has nothing to say
        n = deliver(tool="send_email", to=to, body=body, covered=False, key=None)
    else:
        now = c4a.current()
        covered, key = now.covered, now.idempotency_key
        n = deliver(tool="send_email", to=to, body=body, covered=covered, key=key)
    return f"message #{n} to {to}"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def sent_count() -> int:
    """How many side effects the outbox holds (read-only: not recorded)."""
    return len(outbox.read_text().splitlines()) if outbox.exists() else 0


@server.tool()
def charge_card(card: str, amount: int) -> Receipt:
    """Charge a card; the card "declined" is refused before anything is charged."""
    if card == "declined":
        raise ValueError(f"card {card} was declined")
    n = deliver(tool="charge_card", card=card, amount=amount)
    return Receipt(charge_id=f"ch_{n}", amount=amount)


@server.tool()
def refund(order: str, amount: int) -> Refund:
    """Refund an order (under OnceOnly, a person says yes first)."""
    n = deliver(tool="refund", order=order, amount=amount)
    return Refund(refund_id=f"re_{n}", order=order, amount=amount)


# Tools named as the conformance suite's server scenarios call them (tools-call-*).
PIXEL = bytes.fromhex(
    "89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c4890000000d49444154789c63f8"
    "cfc0f01f0005000201a1d8a4c10000000049454e44ae426082"
)


@server.tool()
def test_simple_text() -> str:
    """Conformance: a text answer."""
    return "This is a simple text response for testing."


@server.tool()
def test_error_handling() -> str:
    """Conformance: a tool that raises."""
    raise RuntimeError("This tool intentionally returns an error for testing")


@server.tool()
def test_image_content() -> Image:
    """Conformance: an image answer."""
    return Image(data=PIXEL, format="png")


@server.tool()
async def test_tool_with_progress(ctx: Context) -> str:
    """Conformance: progress notifications while it runs."""
    for done in (0, 50, 100):
        await ctx.report_progress(done, 100)
    return "Progress test completed"


if transport == "stdio":
    server.run("stdio")
else:
    listener = socket.create_server(("127.0.0.1", 0))
    print(f"PORT {listener.getsockname()[1]}", flush=True)
    config = uvicorn.Config(server.streamable_http_app(), log_level="warning", lifespan="on")
    uvicorn.Server(config).run(sockets=[listener])
