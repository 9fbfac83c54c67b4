"""The MCP rows of ``call4agents quickstart``: a client loses a tools/call response and retries.

Real processes: an MCP server over streamable HTTP (uvicorn) sends emails into an outbox file; a
client process calls ``send_email`` through a proxy that loses the response, then calls again the
way a client retries after a timeout. Without Call4Agents the retry sends a second email; with
``OnceOnly`` on the server and a key from :func:`call4agents_mcp.call_tool` on the client, the
retry gets the first result.

Also runnable alone: ``python -m call4agents_mcp.quickstart``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import sys
import tempfile
import threading
import uuid
from functools import partial
from pathlib import Path
from typing import Any

from call4agents.integration import quickstart_children as _children

MODES = ("plain", "once")
# What the child server and client import, preloaded once by the server they are forked from.
CHILD_IMPORTS = ("mcp", "mcp.server.mcpserver", "httpx", "call4agents_mcp")
_LABELS = {
    "plain": (
        "MCP client, response lost then retried, without Call4Agents",
        "the retry sent it again",
    ),
    "once": (
        "MCP client, response lost then retried, with Call4Agents",
        "the retry got the first result",
    ),
}


# -- a proxy that loses one response -----------------------------------------------------------


class LossyProxy:
    """A TCP proxy on 127.0.0.1 that can lose the response to the next ``tools/call``.

    The request reaches the server and the server answers; the proxy swallows that answer and
    drops the client's connection, as a timeout or a network cut does.
    """

    def __init__(self, upstream_port: int) -> None:
        self._upstream = upstream_port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._armed = threading.Event()
        self.lost = 0
        threading.Thread(target=self._accept, name="lossy-proxy", daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def lose_next_response(self) -> None:
        self._armed.set()

    def close(self) -> None:
        self._listener.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            upstream = socket.create_connection(("127.0.0.1", self._upstream))
            losing = threading.Event()
            for pump in (self._to_server, self._to_client):
                threading.Thread(target=pump, args=(client, upstream, losing), daemon=True).start()

    def _to_server(self, client: socket.socket, upstream: socket.socket, losing: Any) -> None:
        try:
            while data := client.recv(65536):
                if self._armed.is_set() and b'"tools/call"' in data:
                    self._armed.clear()
                    losing.set()
                upstream.sendall(data)
        except OSError:
            pass
        finally:
            _close(upstream)

    def _to_client(self, client: socket.socket, upstream: socket.socket, losing: Any) -> None:
        held = b""
        try:
            while data := upstream.recv(65536):
                if not losing.is_set():
                    client.sendall(data)
                    continue
                held += data
                # Cut only once the JSON-RPC answer came back: the server has finished the call.
                if b'"result"' in held or b'"error"' in held:
                    self.lost += 1
                    break
        except OSError:
            pass
        finally:
            _close(client)
            _close(upstream)


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):  # already closed by the other side
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()


# -- the child processes --------------------------------------------------------------------------


def _mail_server(mode: str, workdir: Path, url: str) -> Any:
    """An MCP server whose ``send_email`` appends to the outbox; ``once`` adds OnceOnly."""
    from mcp.server.mcpserver import MCPServer

    from ._server import OnceOnly

    middleware = [OnceOnly(ledger=_ledger(url))] if mode == "once" else []
    server = MCPServer("mail", middleware=middleware)
    outbox = workdir / f"outbox-mcp-{mode}.txt"

    @server.tool()
    def send_email(to: str, body: str) -> str:
        """Send an email."""
        with outbox.open("a", encoding="utf-8") as f:  # the outside world: one line per email
            f.write(json.dumps({"to": to, "body": body}) + "\n")
            f.flush()
            os.fsync(f.fileno())
        return f"sent message #{sum(1 for _ in outbox.open(encoding='utf-8'))} to {to}"

    return server


def _ledger(url: str) -> Any:
    import call4agents as c4a

    return c4a.Ledger(url)


def _serve(workdir: Path, url: str) -> None:
    """Both servers in one process (one interpreter start is most of the quickstart's time)."""
    import anyio
    import uvicorn

    listeners = {mode: socket.create_server(("127.0.0.1", 0)) for mode in MODES}
    ports = " ".join(f"{m}={s.getsockname()[1]}" for m, s in listeners.items())
    print(f"PORTS {ports}", flush=True)

    async def serve() -> None:
        async with anyio.create_task_group() as tg:
            for mode, listener in listeners.items():
                app = _mail_server(mode, workdir, url).streamable_http_app()
                server = uvicorn.Server(uvicorn.Config(app, log_level="error"))
                tg.start_soon(partial(server.serve, sockets=[listener]))

    anyio.run(serve)


def _client(targets: dict[str, str], run_id: str) -> None:
    """Call send_email; when the answer is lost, call again as a client retry does."""
    import anyio
    from mcp import Client

    import call4agents as c4a

    from ._keys import call_tool

    args = {"to": "bob@example.com", "body": "Your refund is on its way"}

    async def call(mode: str) -> str:
        async with Client(targets[mode]) as client, c4a.run(run_id):
            if mode == "plain":
                result = await client.call_tool("send_email", args)
            else:
                result = await call_tool(client, "send_email", args)
            block = result.content[0]
            return str(getattr(block, "text", block))

    report: dict[str, dict[str, str]] = {}
    for mode in targets:
        outcome = report[mode] = {}
        try:
            outcome["first"] = anyio.run(call, mode)
        except Exception as exc:  # noqa: BLE001 - the lost answer surfaces as a transport error
            outcome["first"] = f"lost ({type(exc).__name__})"
        outcome["retry"] = anyio.run(call, mode)
    print(json.dumps(report), flush=True)


# -- the parent -----------------------------------------------------------------------------------


def _child(*args: str) -> _children.Child:
    return _children.Child(main, list(args), env=None)


def _ports(server: _children.Child) -> dict[str, int]:
    line = server.first_line(timeout=120)
    if not line.startswith("PORTS "):
        server.kill()
        raise RuntimeError(f"the quickstart MCP server did not start:\n{server.stderr}")
    return {m: int(p) for m, _, p in (pair.partition("=") for pair in line.split()[1:])}


def scenario(workdir: Path, url: str) -> list[tuple[str, int, str]]:
    """Rows (label, emails counted, what happened) for plain MCP and MCP with OnceOnly."""
    server = _child("--serve", "--dir", str(workdir), "--url", url)
    proxies: dict[str, LossyProxy] = {}
    try:
        for mode, port in _ports(server).items():
            proxies[mode] = LossyProxy(port)
            proxies[mode].lose_next_response()
        targets = json.dumps({mode: proxy.url for mode, proxy in proxies.items()})
        run_id = f"quickstart-{uuid.uuid4().hex[:8]}"
        with _child("--client", targets, "--run", run_id) as client:
            if client.wait(120) != 0:
                raise RuntimeError(f"the quickstart MCP client failed:\n{client.stderr}")
            out = client.stdout
        lost = {
            mode: outcome["first"].startswith("lost") for mode, outcome in json.loads(out).items()
        }
        if not all(lost.values()):
            raise RuntimeError(f"the proxy did not lose the first answer: {out}")
        return [(_LABELS[m][0], _emails(workdir, m), _LABELS[m][1]) for m in MODES]
    finally:
        for proxy in proxies.values():
            proxy.close()
        server.close()  # our own child, by its handle


def _emails(workdir: Path, mode: str) -> int:
    outbox = workdir / f"outbox-mcp-{mode}.txt"
    return sum(1 for _ in outbox.open(encoding="utf-8")) if outbox.exists() else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m call4agents_mcp.quickstart")
    parser.add_argument("--serve", action="store_true")
    parser.add_argument("--client", metavar="TARGETS_JSON")
    parser.add_argument("--dir", type=Path)
    parser.add_argument("--url")
    parser.add_argument("--run")
    args = parser.parse_args(argv)
    if args.serve:
        _serve(args.dir, args.url)
        return 0
    if args.client:
        _client(json.loads(args.client), args.run)
        return 0
    _children.preload([f"{__package__}.quickstart", *CHILD_IMPORTS])
    with tempfile.TemporaryDirectory(prefix="c4a-mcp-quickstart-") as tmp:
        workdir = Path(tmp)
        for label, emails, happened in scenario(workdir, f"sqlite:///{workdir / 'ledger.db'}"):
            print(f"{label:<64} {emails} email(s)  {happened}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
