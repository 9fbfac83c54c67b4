"""PostgreSQL LISTEN/NOTIFY: a worker waiting on another's action is woken when its outcome lands.

Each process keeps, per ledger, one listening connection outside the pool, served by a daemon
thread, opened on the first wait and closed after a quiet spell. Waiters register their keys with
it and otherwise sleep; they re-read the row when woken, at the lease's end, and every few seconds
in case a notification was missed.

Why a gate on NOTIFY: a transaction that notifies takes one lock shared by the whole server from
just before its commit to just after it, commit flush included (PostgreSQL's async.c,
PreCommit_Notify), so if every finished action notified, all workers' commits would queue behind
one another. A finishing transaction therefore notifies only when someone waits for that key:

    waiter    LISTEN; take a shared advisory lock on the key's id; read the row; sleep.
    finisher  UPDATE the row; try the exclusive advisory transaction lock on the same id; if it
              is refused (a waiter holds it), NOTIFY with the key as payload; COMMIT.

A waiter whose shared lock was granted reads after every finisher that did not notify has
committed (such a finisher held the exclusive lock until its commit, refusing the waiter until
then), and every later finisher finds the lock held and notifies. Ids that collide only cause a
spurious wake-up. While its lock is not granted, a waiter polls.
"""

from __future__ import annotations

import asyncio
import contextlib
import selectors
import socket
import threading
import time
import weakref
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine

from call4agents.model import platform

# With nobody waiting for this long, the listening connection is closed (reopened on demand).
IDLE_CLOSE = 30.0
_BUSY_TICK = 0.05  # how often the listener retries a shared lock that was refused
# Names "Call4Agents waiters" among advisory locks (the migration lock is the one-bigint form of
# 0x0C4A0001, a separate key space).
LOCK_CLASS = 0x0C4A0002


def channel_for(schema: str | None) -> str:
    """The NOTIFY channel of one ledger: schemas sharing a database do not wake each other."""
    return ("c4a_" + schema if schema else "c4a_ledger")[:63]


def lock_id(schema: str | None, key: str) -> int:
    """A signed 32-bit id for the key's advisory lock."""
    value = zlib.crc32(f"{schema or ''}|{key}".encode())
    return value - (1 << 32) if value >= 1 << 31 else value


@dataclass(frozen=True)
class Target:
    """How to open one ledger's listening connection."""

    connect_kwargs: dict[str, Any]
    schema: str | None
    # False behind a transaction pooler: a LISTEN and the waiters' session locks would stay on a
    # server connection the pooler hands to others, so waiters poll instead.
    listen: bool = True
    # True behind a pooler with durability="process": each transaction turns synchronous commit
    # off itself (no startup options there).
    sync_off: bool = False

    @property
    def channel(self) -> str:
        return channel_for(self.schema)


class Watch:
    """One waiter's interest in one key; a thread or a coroutine sleeps on it."""

    def __init__(self, key: str, listener: Listener | None) -> None:
        self.key = key
        self._listener = listener
        self._lock = threading.Lock()
        self._woken = threading.Event()
        self._future: tuple[asyncio.AbstractEventLoop, asyncio.Future[None]] | None = None

    @property
    def guarded(self) -> bool:
        """True when a finisher of this key will notify us (our shared lock is granted)."""
        return self._listener is not None and self._listener.is_guarded(self.key)

    def wait(self, timeout: float) -> None:
        """Sleep until woken or ``timeout`` seconds pass; the wake-up is consumed."""
        self._woken.wait(max(0.0, timeout))
        self._woken.clear()

    async def wait_async(self, timeout: float) -> None:
        """Like ``wait``, sleeping on the event loop instead of holding a thread."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        with self._lock:
            if self._woken.is_set():
                self._woken.clear()
                return
            self._future = (loop, future)
        try:
            await asyncio.wait_for(future, max(0.0, timeout))
        except asyncio.TimeoutError:
            pass
        finally:
            with self._lock:
                self._future = None
                self._woken.clear()

    def wake(self) -> None:
        with self._lock:
            self._woken.set()
            waiting = self._future
        if waiting is not None:
            loop, future = waiting
            with contextlib.suppress(RuntimeError):  # the loop has closed: nobody waits
                loop.call_soon_threadsafe(_resolve, future)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class Listener:
    """The listening connection of one ledger in this process, and the keys waited on."""

    def __init__(self, target: Target) -> None:
        self._target = target
        self._lock = threading.Lock()
        self._watches: dict[str, set[Watch]] = {}
        # Keys whose shared lock the connection of session number `_session` holds.
        self._guarded: set[str] = set()
        self._session = 0
        self._closed = False
        self._thread: threading.Thread | None = None
        self._idle_since = time.monotonic()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)

    # -- the waiters' side ------------------------------------------------------------------

    def add(self, watch: Watch) -> None:
        with self._lock:
            self._watches.setdefault(watch.key, set()).add(watch)
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(
                    target=self._run, name="call4agents-listen", daemon=True
                )
                self._thread.start()
        self._poke()

    def remove(self, watch: Watch) -> None:
        with self._lock:
            found = self._watches.get(watch.key)
            if found is not None:
                found.discard(watch)
                if not found:
                    del self._watches[watch.key]
            if not self._watches:
                self._idle_since = time.monotonic()
        self._poke()

    def is_guarded(self, key: str) -> bool:
        with self._lock:
            return key in self._guarded

    def close(self) -> None:
        with self._lock:
            self._closed = True
        self._poke()

    def _poke(self) -> None:
        with contextlib.suppress(OSError):  # a full buffer already means "look again"
            self._wake_w.send(b"x")

    # -- the thread -------------------------------------------------------------------------

    def _run(self) -> None:
        import psycopg

        backoff = 0.05
        while not self._should_stop():
            try:
                conn = psycopg.connect(**self._target.connect_kwargs, autocommit=True)
            except (psycopg.Error, OSError):
                self._sleep(backoff)
                backoff = min(backoff * 2, 2.0)
                continue
            backoff = 0.05
            with self._lock:
                self._session += 1
                session = self._session
            stop = False
            try:
                stop = self._serve(conn)
            except (psycopg.Error, OSError):
                pass  # the server went away: everyone polls until we are back
            finally:
                self._lost(session)
                with contextlib.suppress(psycopg.Error, OSError):
                    conn.close()
            if stop:
                return

    def _serve(self, conn: Any) -> bool:
        """Listen until told to stop (True) or the connection fails (raises)."""
        conn.add_notify_handler(lambda n: self._dispatch(n.channel, n.payload))
        conn.execute(f'LISTEN "{self._target.channel}"')
        pgconn = conn.pgconn
        with selectors.DefaultSelector() as sel:
            sel.register(pgconn.socket, selectors.EVENT_READ, "server")
            sel.register(self._wake_r, selectors.EVENT_READ, "poke")
            while True:
                self._sync_locks(conn)
                if self._should_stop():
                    return True
                with self._lock:
                    busy = bool(self._watches.keys() - self._guarded)
                for found, _ in sel.select(_BUSY_TICK if busy else 1.0):
                    if found.data == "poke":
                        with contextlib.suppress(OSError):
                            self._wake_r.recv(4096)
                        continue
                    pgconn.consume_input()  # raises once the server has closed the connection
                    while (n := pgconn.notifies()) is not None:
                        self._dispatch(n.relname.decode(), n.extra.decode())

    def _sync_locks(self, conn: Any) -> None:
        """Hold a shared lock for every waited key, and only for those."""
        with self._lock:
            wanted, held = set(self._watches), set(self._guarded)
        for key in held - wanted:
            conn.execute(
                "SELECT pg_advisory_unlock_shared(%s, %s)",
                (LOCK_CLASS, lock_id(self._target.schema, key)),
            )
            with self._lock:
                self._guarded.discard(key)
        for key in wanted - held:
            row = conn.execute(
                "SELECT pg_try_advisory_lock_shared(%s, %s)",
                (LOCK_CLASS, lock_id(self._target.schema, key)),
            ).fetchone()
            if row is None or not row[0]:
                continue  # a finisher is committing right now: try again in a moment
            with self._lock:
                self._guarded.add(key)
                watches = list(self._watches.get(key, ()))
            for watch in watches:
                watch.wake()  # read the row again, now that a finisher will tell us

    def _dispatch(self, channel: str, key: str) -> None:
        if channel != self._target.channel:
            return
        with self._lock:
            watches = list(self._watches.get(key, ()))
        for watch in watches:
            watch.wake()

    def _lost(self, session: int) -> None:
        with self._lock:
            if session != self._session:
                return
            self._guarded.clear()
            watches = [w for ws in self._watches.values() for w in ws]
        for watch in watches:
            watch.wake()  # back to polling until a connection holds their locks again

    def _should_stop(self) -> bool:
        """True once: then this thread is no longer the listener's and must return."""
        with self._lock:
            idle = not self._watches and time.monotonic() - self._idle_since > IDLE_CLOSE
            if self._closed or idle:
                self._thread = None
                return True
            return False

    def _sleep(self, seconds: float) -> None:
        with selectors.DefaultSelector() as sel:
            sel.register(self._wake_r, selectors.EVENT_READ)
            if sel.select(seconds):
                with contextlib.suppress(OSError):
                    self._wake_r.recv(4096)


# -- one listener per engine, per process -------------------------------------------------------

_targets: weakref.WeakKeyDictionary[Engine, Target] = weakref.WeakKeyDictionary()
_listeners: weakref.WeakKeyDictionary[Engine, Listener] = weakref.WeakKeyDictionary()
_registry = threading.Lock()


def register(
    engine: Engine,
    connect_kwargs: dict[str, Any],
    schema: str | None,
    *,
    listen: bool = True,
    sync_off: bool = False,
) -> None:
    """Remember how to listen for ``engine``'s ledger (``stop_listening`` closes it)."""
    with _registry:
        _targets[engine] = Target(dict(connect_kwargs), schema, listen, sync_off)


def target_of(engine: Engine) -> Target | None:
    """How to open a connection of one's own to ``engine``'s ledger; None if not PostgreSQL."""
    with _registry:
        return _targets.get(engine)


def stop_listening(engine: Engine) -> None:
    """Close ``engine``'s listening connection, if it has one, as its ledger closes. (Not on
    the engine's ``engine_disposed`` event: an engine with a connection event of the ledger's
    own would make SQLAlchemy dispatch events on every statement; see _db.)"""
    with _registry:
        listener = _listeners.pop(engine, None)
    if listener is not None:
        listener.close()


@contextlib.contextmanager
def watch(engine: Engine, key: str, *, listen: bool = True) -> Iterator[Watch]:
    """Register interest in ``key`` for the duration of a wait (polling only if not ``listen``)."""
    with _registry:
        target = _targets.get(engine) if listen else None
        if target is not None and not target.listen:
            target = None
        listener = _listeners.get(engine) if target is not None else None
        if target is not None and listener is None:
            listener = _listeners[engine] = Listener(target)
    found = Watch(key, listener)
    if listener is None:
        yield found
        return
    listener.add(found)
    try:
        yield found
    finally:
        listener.remove(found)


def _after_fork_in_child() -> None:
    # The parent's listening threads do not exist here and its connections are not ours to
    # use or close (psycopg never ends a connection from a process that did not open it).
    global _registry
    _registry = threading.Lock()
    _listeners.clear()


platform.at_fork(after_in_child=_after_fork_in_child)
