"""Live updates pushed to open pages: the ledger's news (PostgreSQL LISTEN) as server-sent events.

One listening connection per console (``Ledger.listen``), served by one thread, whatever the
number of open pages; each page's event stream gets the news through its own queue. On SQLite,
or while the listening connection is down, pages poll ``/api/live`` every two seconds instead:
the stream answers 204 (SQLite: the browser stops asking) or ends (the browser polls, and tries
the stream again a few seconds later).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

from starlette.responses import Response, StreamingResponse

from call4agents import Ledger, LedgerError
from call4agents.storage.news import News

from ._web import NO_STORE, Ask

READY = News("ready", "")  # the feed listens: a page checks once for what it may have missed
LOST = News("lost", "")  # the feed stopped listening: a page polls until it is back
KEEP_ALIVE = 15.0  # seconds between comments on a quiet stream, so a dead client is noticed
RETRY_MS = 5000  # how soon a browser asks for the stream again after it ended
IDLE_CLOSE = 30.0  # seconds with no page open before the listening connection is closed
_TICK = 1.0


@dataclass(eq=False)
class _Page:
    loop: asyncio.AbstractEventLoop
    queue: asyncio.Queue[News]

    def tell(self, news: News) -> None:
        self.loop.call_soon_threadsafe(self.queue.put_nowait, news)


class LiveHub:
    """The console's one listener, started by the first open page, closed when none is left."""

    def __init__(self, ledger: Ledger) -> None:
        self._ledger = ledger
        self._lock = threading.Lock()
        self._pages: set[_Page] = set()
        self._thread: threading.Thread | None = None
        self._listening = False
        self._closed = False
        self._idle_since = time.monotonic()

    @property
    def available(self) -> bool:
        return self._ledger.dialect == "postgresql"

    def subscribe(self) -> _Page:
        found = _Page(asyncio.get_running_loop(), asyncio.Queue())
        with self._lock:
            self._pages.add(found)
            if self._listening:
                found.tell(READY)
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(
                    target=self._run, name="c4a-console-live", daemon=True
                )
                self._thread.start()
        return found

    def unsubscribe(self, page: _Page) -> None:
        with self._lock:
            self._pages.discard(page)
            if not self._pages:
                self._idle_since = time.monotonic()

    def close(self) -> None:
        with self._lock:
            self._closed = True

    def _tell_all(self, news: News) -> None:
        with self._lock:
            pages = list(self._pages)
        for page in pages:
            page.tell(news)

    def _should_stop(self) -> bool:
        with self._lock:
            idle = not self._pages and time.monotonic() - self._idle_since > IDLE_CLOSE
            if self._closed or idle:
                self._thread = None
                self._listening = False
                return True
            return False

    def _run(self) -> None:
        backoff = 0.5
        while not self._should_stop():
            try:
                feed = self._ledger.listen()
            except LedgerError:
                time.sleep(backoff)
                backoff = min(backoff * 2, 10.0)
                continue
            if feed is None:
                return
            backoff = 0.5
            with self._lock:
                self._listening = True
            self._tell_all(READY)
            try:
                while not self._should_stop():
                    for news in feed.wait(_TICK):
                        self._tell_all(news)
            except LedgerError:
                with self._lock:
                    self._listening = False
                self._tell_all(LOST)
            finally:
                feed.close()


def events(hub: LiveHub, ledger: Ledger, ask: Ask) -> Response:
    """``/api/events``: the news as server-sent events; 204 where the ledger cannot push."""
    if not hub.available:
        return Response(status_code=204, headers=NO_STORE)
    streamed = {**NO_STORE, "X-Accel-Buffering": "no"}  # a proxy must not hold events back
    return StreamingResponse(_stream(hub), media_type="text/event-stream", headers=streamed)


async def _stream(hub: LiveHub) -> AsyncIterator[str]:
    page = hub.subscribe()
    try:
        yield f"retry: {RETRY_MS}\n\n"
        while True:
            try:
                news = await asyncio.wait_for(page.queue.get(), KEEP_ALIVE)
            except asyncio.TimeoutError:  # not TimeoutError before Python 3.11
                yield ": still here\n\n"
                continue
            if news is LOST:
                return  # the browser polls, and asks for the stream again in RETRY_MS
            event = "ready" if news is READY else "news"
            yield f"event: {event}\ndata: {json.dumps({'what': news.what, 'id': news.id})}\n\n"
    finally:
        hub.unsubscribe(page)
