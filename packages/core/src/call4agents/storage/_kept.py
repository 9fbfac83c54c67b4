"""Connections of a ledger's pool that an action's transactions keep checked out.

A fresh action is two short transactions and a repeat from the database one read. Checking a
connection out of SQLAlchemy's pool and back in each time (a new ``Connection``, the pool's
lock, reset and events) costs more than an SQLite commit. So those transactions take a
connection kept here and give it back when they end: it stays checked out of the ledger's one
pool, and every statement still goes through SQLAlchemy (its events, its error wrapping).

After a fork the child leaves its parent's kept connections alone: closing a copy would end the
parent's session on the server.
"""

from __future__ import annotations

import contextlib
import time
from collections import deque
from typing import Any

from sqlalchemy import Connection, Engine
from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from call4agents.model import platform

from ._db import OPTIMIZE_EVERY, database_failed, has_input, socket_poll
from .sqlite_tx import reading

_forks = 0  # forks between the process that loaded this module and this one, counted in each child
_INHERITED: list[Any] = []  # a forked child's copies of its parent's kept connections


def _forked() -> None:
    global _forks
    _forks += 1


platform.at_fork(after_in_child=_forked)

# A kept connection, a poll object on its socket (PostgreSQL: made once, since making one per
# transaction costs more than polling), and when it was checked out of the pool.
_Held = tuple[Connection, Any, float]


class Kept:
    """Connections of one kind kept for an action's transactions (see ``Transaction``): at most
    ``SIZE`` wait here; one more, or one kept for ``RECYCLE`` seconds, goes back to the pool,
    whose checkin runs SQLite's periodic ``PRAGMA optimize``.

    ``autocommit``: each statement is its own transaction (PostgreSQL's one-statement ones);
    ``reads``: the connections only read (their SQLite transactions begin deferred).
    """

    SIZE = 4
    RECYCLE = OPTIMIZE_EVERY

    def __init__(self, engine: Engine, *, autocommit: bool = False, reads: bool = False) -> None:
        self._engine = (
            engine.execution_options(isolation_level="AUTOCOMMIT") if autocommit else engine
        )
        self._reads = reads
        self._postgres = engine.dialect.name == "postgresql"
        self._idle: deque[_Held] = deque()
        self._forks = _forks
        self._open = True

    def _left_by_fork(self) -> None:
        """Forked: the idle ones are the parent's. Kept referenced, never closed or collected
        here, since closing a copy would end the parent's session on the server."""
        _INHERITED.extend(self._idle)
        self._idle, self._forks = deque(), _forks

    def _checkout(self) -> _Held:
        conn = self._engine.connect()
        if self._reads:
            reading(conn)
        poll = None
        if self._postgres:
            driver: Any = conn.connection.driver_connection
            try:
                poll = socket_poll(driver.pgconn.socket)
            except BaseException:
                conn.close()
                raise
        return (conn, poll, time.monotonic())

    def _stale(self, held: _Held) -> bool:
        """Closed, or (PostgreSQL) a goodbye from the server waits unread (restart, failover,
        idle timeout): such a connection would fail its next statement."""
        conn, poll, _ = held
        if conn.invalidated or conn.closed:
            return True
        driver: Any = conn.connection.driver_connection
        try:
            if driver.closed:  # broken implies closed; libpq closes a socket only after saying so
                return True
            return bool(poll.poll(0)) if poll is not None else has_input(driver.pgconn.socket)
        except Exception:  # noqa: BLE001 - libpq knows the socket is gone
            return True

    def _drop(self, held: _Held) -> None:
        """Return it to the pool (rolled back); one that fails even that is invalidated."""
        conn = held[0]
        try:
            conn.close()
        except Exception:  # noqa: BLE001 - it broke mid-transaction: the pool forgets it
            with contextlib.suppress(Exception):
                conn.invalidate()

    def close(self) -> None:
        """Return the idle connections to the pool; those in use go back as they end."""
        self._open = False
        while self._idle:
            self._drop(self._idle.pop())


class Transaction:
    """``with Transaction(kept) as conn:`` one transaction on a kept connection: committed at
    the end, or rolled back with the connection dropped on an error; database faults come out as
    one-line LedgerErrors. A plain class, not a generator context manager: it wraps every
    transaction of an action, at a fraction of the cost."""

    __slots__ = ("_held", "_kept")

    def __init__(self, kept: Kept) -> None:
        self._kept = kept

    def __enter__(self) -> Connection:
        kept = self._kept
        if kept._forks != _forks:
            kept._left_by_fork()
        while True:
            try:
                held = kept._idle.pop()
            except IndexError:
                break
            if not (kept._postgres and kept._stale(held)):  # SQLite's do not go stale
                self._held = held
                return held[0]
            kept._drop(held)
        try:
            self._held = kept._checkout()
        except (DBAPIError, PoolTimeout) as exc:
            raise database_failed(exc) from exc
        return self._held[0]

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: Any
    ) -> None:
        held, kept = self._held, self._kept
        if exc is not None:
            self._failed(exc)
            return
        try:
            held[0].commit()
        except BaseException as failed:
            self._failed(failed)
            raise
        if kept._forks != _forks:
            _INHERITED.append(held)
        elif (
            kept._open
            and len(kept._idle) < kept.SIZE
            and (time.monotonic() - held[2] < kept.RECYCLE)
        ):
            kept._idle.append(held)
        else:
            kept._drop(held)

    def _failed(self, exc: BaseException) -> None:
        self._kept._drop(self._held)  # it may hold a half-done transaction
        if isinstance(exc, (DBAPIError, PoolTimeout)):
            raise database_failed(exc) from exc
