"""An MCP mail server over streamable HTTP (or stdio), made once-only with one line.

    python examples/mcp/server.py [--port 8000]
    npx @modelcontextprotocol/inspector python examples/mcp/server.py --stdio

Prints its URL when it is listening. Point examples/mcp/client.py at it. The ledger is
$CALL4AGENTS_URL, else sqlite:///.c4a/ledger.db; give several replicas one PostgreSQL URL and a
retry that lands on another replica gets the first result too. Over stdio (one client, no session
id), a call without a client key runs outside the ledger, with a warning: the tool still runs,
and c4a.current().covered says it is not covered.
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
    # Stable across retries of a covered call: hand it to the mail provider. A call the ledger
    # cannot key (no client key, no caller identity) has covered=False and a key of its own.
    key = c4a.current().idempotency_key
    outbox.append(to)
    return f"message #{len(outbox)} to {to} (idempotency key {key})"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def sent_count() -> int:
    """How many emails this process sent (read-only: not recorded)."""
    return len(outbox)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--stdio", action="store_true", help="serve one client over stdio")
    options = parser.parse_args()
    if options.stdio:
        server.run("stdio")
        raise SystemExit
    port = options.port
    listener = socket.create_server(("127.0.0.1", port))
    print(f"listening on http://127.0.0.1:{listener.getsockname()[1]}/mcp", flush=True)
    config = uvicorn.Config(server.streamable_http_app(), log_level="warning")
    uvicorn.Server(config).run(sockets=[listener])
