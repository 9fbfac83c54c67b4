"""An MCP mail server over streamable HTTP, made once-only with one line.

    python examples/mcp/server.py [--port 8000]

Prints its URL when it is listening. Point examples/mcp/client.py at it. The ledger is
$CALL4AGENTS_URL, else sqlite:///.c4a/ledger.db; give several replicas one PostgreSQL URL and a
retry that lands on another replica gets the first result too.
"""

from __future__ import annotations

import argparse
import socket

import uvicorn
from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

import call4agents as c4a
from call4agents_mcp import OnceOnly

c4a.init()
server = MCPServer("mail", middleware=[OnceOnly()])  # <- the one line
outbox: list[str] = []


@server.tool()
def send_email(to: str, body: str) -> str:
    """Send an email."""
    key = c4a.current().idempotency_key  # stable across retries: hand it to the mail provider
    outbox.append(to)
    return f"message #{len(outbox)} to {to} (idempotency key {key})"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def sent_count() -> int:
    """How many emails this process sent (read-only: not recorded)."""
    return len(outbox)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    port = parser.parse_args().port
    listener = socket.create_server(("127.0.0.1", port))
    print(f"listening on http://127.0.0.1:{listener.getsockname()[1]}/mcp", flush=True)
    config = uvicorn.Config(server.streamable_http_app(), log_level="warning")
    uvicorn.Server(config).run(sockets=[listener])
