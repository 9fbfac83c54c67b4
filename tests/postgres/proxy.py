"""A TCP proxy the fault tests steer: it cuts, refuses and swallows PostgreSQL connections.

It listens on 127.0.0.1 only, on a free port, and runs an asyncio loop in a daemon thread of the
test process, so a test (or a tool inside it) can break the database connection at an exact step:

    with Proxy(upstream_port=5432) as proxy:
        ledger = c4a.Ledger(proxy.url(base_url), ...)
        proxy.cut()        # close every open connection now, as a server restart would
        proxy.refuse()     # new connections are closed as soon as they open ...
        proxy.accept()     # ... until this
        proxy.swallow()    # forward the client's bytes, drop the server's replies (lost acks)

Every call waits until the loop has done it. Bounded: at most ``max_connections`` at once, an
upstream connect gives up after five seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Coroutine
from types import TracebackType
from typing import Any

from sqlalchemy.engine import make_url


class Proxy:
    def __init__(self, upstream_port: int = 5432, *, max_connections: int = 64) -> None:
        self.upstream = ("127.0.0.1", upstream_port)
        self.max_connections = max_connections
        self.port = 0
        self.opened = 0  # connections accepted so far, for tests that want to see reconnects
        self._refusing = False
        self._swallowing = False
        self._cut_next = False
        self._pairs: set[tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = set()
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.Server | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    # -- control, from any thread -----------------------------------------------------------

    def __enter__(self) -> Proxy:
        self._thread.start()
        self._call(self._start())
        return self

    def __exit__(self, *exc: object | TracebackType) -> None:
        self._call(self._stop())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        self._loop.close()

    def url(self, base: str) -> str:
        """``base`` pointed at this proxy instead of the server."""
        found = make_url(base).set(host="127.0.0.1", port=self.port)
        return found.render_as_string(hide_password=False)

    def cut(self) -> None:
        """Close every open connection, both ways."""
        self._call(self._cut())

    def refuse(self) -> None:
        self._refusing = True

    def accept(self) -> None:
        self._refusing = False
        self._swallowing = False

    def swallow(self) -> None:
        self._swallowing = True

    def cut_at_next_request(self) -> None:
        """The next bytes any client sends never reach the server: every connection drops then.

        Arms a cut at an exact step without an engine listener: armed inside a tool, it
        catches the statement that writes the outcome.
        """
        self._cut_next = True

    def down(self) -> None:
        """The database is away: refuse new connections and cut the open ones."""
        self.refuse()
        self.cut()

    def up_after(self, seconds: float) -> threading.Timer:
        """Accept connections again ``seconds`` from now (from a timer thread)."""
        timer = threading.Timer(seconds, self.accept)
        timer.daemon = True
        timer.start()
        return timer

    def _call(self, coro: Coroutine[Any, Any, None]) -> None:
        asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout=10)

    # -- the loop ---------------------------------------------------------------------------

    async def _start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _stop(self) -> None:
        if self._server is not None:
            self._server.close()
        await self._cut()
        # Let the cut connections' handlers finish before the loop stops under them.
        handlers = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        if handlers:
            await asyncio.wait(handlers, timeout=5)

    async def _cut(self) -> None:
        for client, server in list(self._pairs):
            for writer in (client, server):
                writer.transport.abort()
        self._pairs.clear()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.opened += 1
        if self._refusing or len(self._pairs) >= self.max_connections:
            writer.transport.abort()
            return
        try:
            up_reader, up_writer = await asyncio.wait_for(
                asyncio.open_connection(*self.upstream), timeout=5
            )
        except (OSError, asyncio.TimeoutError):
            writer.transport.abort()
            return
        pair = (writer, up_writer)
        self._pairs.add(pair)
        try:
            await asyncio.gather(
                self._pump(reader, up_writer, replies=False),
                self._pump(up_reader, writer, replies=True),
            )
        finally:
            self._pairs.discard(pair)
            for w in pair:
                w.transport.abort()

    async def _pump(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, replies: bool
    ) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            while data := await reader.read(65536):
                if not replies and self._cut_next:
                    self._cut_next = False
                    await self._cut()
                    break
                if replies and self._swallowing:
                    continue  # the server's answer never reaches the client
                writer.write(data)
                await writer.drain()
        writer.transport.abort()
