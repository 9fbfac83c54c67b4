"""A real MCP server process for the HTTP tests: MCPServer + OnceOnly over streamable HTTP.

Usage: http_server.py MODE OUTBOX REPLICA
  MODE     "once" (with OnceOnly) or "plain" (without)
  OUTBOX   the file each delivered email is appended to (the outside world)
  REPLICA  a name written into each line, to tell replicas apart

The ledger is C4A_TEST_URL (+ C4A_TEST_SCHEMA). It listens on 127.0.0.1 on a free port and prints
"PORT <n>" once the socket is listening. With WORKDIR set, the slow tool writes
WORKDIR/started-<replica> and then waits for WORKDIR/release; every tools/call that arrives
touches WORKDIR/arrived-<replica>, and WORKDIR/cancelled-<replica> if it is cancelled.
NO_GRACE=1 sets OnceOnly(cancel_grace=None); APPROVAL=1 makes send_email need a person's yes.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from pathlib import Path
from typing import Any

import anyio
import uvicorn
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import MCPServer

import call4agents as c4a
from call4agents_mcp import OnceOnly

mode, outbox, replica = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
workdir = Path(os.environ["WORKDIR"]) if os.environ.get("WORKDIR") else None


async def arrivals(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
    """Marks each tools/call's arrival, and its cancellation (a client timeout cuts the stream)."""
    if workdir is None or ctx.method != "tools/call":
        return await call_next(ctx)
    (workdir / f"arrived-{replica}").touch()
    finished = anyio.Event()

    async def watch() -> None:
        # The request task is cancelled while OnceOnly still runs the tool; this sibling task
        # sees the cancel at once (OnceOnly's own wait only ends when the tool does).
        try:
            await finished.wait()
        except anyio.get_cancelled_exc_class():
            (workdir / f"cancelled-{replica}").touch()
            raise

    async with anyio.create_task_group() as tg:
        tg.start_soon(watch)
        try:
            return await call_next(ctx)
        finally:
            finished.set()


middleware: list[Any] = [arrivals]
if mode == "once":
    c4a.init(
        os.environ["C4A_TEST_URL"], schema=os.environ.get("C4A_TEST_SCHEMA") or None, wait=60.0
    )
    # NO_GRACE=1: a call the client cancels is stopped at once (the default lets it finish).
    middleware.append(
        OnceOnly(
            cancel_grace=None if os.environ.get("NO_GRACE") else 60.0,
            tools={"send_email": {"approval": True}} if os.environ.get("APPROVAL") else None,
        )
    )
server = MCPServer("mail", middleware=middleware)


def deliver(to: str) -> int:
    with outbox.open("a", encoding="utf-8") as f:
        f.write(json.dumps({"to": to, "replica": replica, "pid": os.getpid()}) + "\n")
        f.flush()
        os.fsync(f.fileno())
    return len(outbox.read_text().splitlines())


@server.tool()
def send_email(to: str, body: str) -> str:
    """Send an email."""
    return f"message #{deliver(to)} to {to} (by {replica})"


@server.tool()
async def send_email_slowly(to: str, body: str) -> str:
    """Send an email once WORKDIR/release exists (async: a cancel can stop it while it waits)."""
    assert workdir is not None
    (workdir / f"started-{replica}").touch()
    while not (workdir / "release").exists():
        await anyio.sleep(0.01)
    return f"message #{deliver(to)} to {to} (by {replica})"


listener = socket.create_server(("127.0.0.1", 0))
print(f"PORT {listener.getsockname()[1]}", flush=True)
config = uvicorn.Config(server.streamable_http_app(), log_level="warning", lifespan="on")
uvicorn.Server(config).run(sockets=[listener])
