"""The hot statements of an effect, on driver connections of their own.

A fresh effect is two commits (intent, then outcome) and a repeat is one keyed read; SQLAlchemy's
per-transaction and per-statement work (events, result objects, parameter processing) cost more
than the SQLite commit itself. So the claim, the plain outcome write and the keyed read go as
hand-written SQL on driver connections of their own, in autocommit:

- SQLite: ``BEGIN IMMEDIATE``, the intent ``INSERT ... ON CONFLICT DO NOTHING RETURNING``,
  ``COMMIT``; on a conflict, ``ROLLBACK`` and a read of the row that exists.
- PostgreSQL: one statement and one round trip. The intent insert and a read of the row it met
  share a snapshot, so a conflict returns the existing row; a conflict with no row in sight (it
  was committed after the snapshot) goes the long way.

When a repeat is likely, the caller first asks ``recorded`` for the result: one plain keyed read
of one column. An insert attempt costs the server far more than a read (it locks the table and
opens every index), and a succeeded row is final, so finding one settles the call with no write
at all. Anything else the read finds (no row, or one still open or failed) goes on to the claim,
whose insert alone decides who runs the tool.

Anything other than the plain case (a failed row to restart, a fenced-off outcome, a gate to ask)
returns ``None`` and the caller takes the SQLAlchemy path, where every rule is stated once. An
engine someone listens to (``before_cursor_execute`` and the like: OpenTelemetry's SQLAlchemy
instrumentation, a test's fault injection) always takes that path, so every statement is seen.
"""

from __future__ import annotations

import contextlib
import threading
from collections import deque
from collections.abc import Callable
from typing import Any, TypeVar, cast

from sqlalchemy import Engine
from sqlalchemy.exc import DBAPIError

from call4agents.model import platform

from . import _db, _forkgate, _pg
from .dialects import dialect_of

T = TypeVar("T")

BUSY = object()  # every connection of the hot path is in use: take the long path
_INHERITED: list[Any] = []  # a forked child's copies of its parent's connections
# Forks between the process that loaded this module and this one, counted in each child: the
# hot path compares it on every statement instead of the pid (os.getpid is a system call).
_forks = 0


def _forked() -> None:
    global _forks
    _forks += 1


platform.at_fork(after_in_child=_forked)

# A driver connection, its cursor, and (PostgreSQL, where select.poll exists) a poll object
# registered on its socket once, since making one per statement costs more than polling.
_Conn = tuple[Any, Any, Any]
_Claimed = tuple[int, tuple[Any, ...]]  # (attempt to run, ()) or (0, the row that exists)


class HotPath:
    """The claim, the outcome and the keyed read of one ledger's engine, on the bare driver."""

    def __init__(self, engine: Engine, schema: str | None, columns: list[str]) -> None:
        """``columns`` are those of a row read, in the order the store's readers expect."""
        self.engine = engine
        self.postgres = engine.dialect.name == "postgresql"
        self._driver_error: Any = engine.dialect.loaded_dbapi.Error  # the driver's own faults
        table = f'"{schema}".c4a_effects' if schema else "c4a_effects"
        now = dialect_of(engine.dialect.name).now_text
        m = "%s" if self.postgres else "?"
        cols = ", ".join(columns)
        insert = (
            f"INSERT INTO {table} (key, run_id, tool, kind, args, args_digest, owner, state, "
            f"attempt, lease_expires_at, created_at, updated_at) VALUES ({m}, {m}, {m}, {m}, "
            f"{m}, {m}, {m}, 'started', 1, {now} + {m}, {now}, {now}) ON CONFLICT (key) DO NOTHING "
            "RETURNING attempt"
        )
        self.select_sql = f"SELECT {cols}, {now} FROM {table} WHERE key = {m}"
        # What a repeat needs of a finished action: its result, nothing else to load.
        self.result_sql = (
            f"SELECT result FROM {table} WHERE key = {m} AND state = 'succeeded' "
            "AND pruned_at IS NULL AND result IS NOT NULL"
        )
        self.insert_sql = insert
        # The row the insert met, read in the insert's own snapshot: our own new row is never
        # in it, a committed one always is (unless it committed after the snapshot was taken).
        found = ", ".join(f"e.{c}" for c in columns)
        # Behind a pooler, durability="process" is set by each statement for its own
        # transaction (each runs alone, in autocommit), as no startup option may set it.
        target = _pg.target_of(engine)
        one = f"SELECT {_db.SYNC_OFF}" if target is not None and target.sync_off else "SELECT 1"
        self.claim_sql = (
            f"WITH ins AS ({insert}) SELECT (SELECT attempt FROM ins), {found}, {now} "
            f"FROM ({one}) AS one LEFT JOIN {table} AS e ON e.key = {m}"
        )
        update = (
            f"UPDATE {table} SET state = {m}, result = {m}, error = {m}, note = {m}, "
            f"owner = NULL, lease_expires_at = NULL, updated_at = {now} "
            + (f"FROM ({one}) AS one " if one != "SELECT 1" else "")
            + f"WHERE key = {m} AND attempt = {m} AND (state = 'started' OR state = 'in_doubt')"
        )
        # On PostgreSQL the outcome also wakes a waiter, if one holds the key's lock (see _pg).
        self.finish_sql = f"{update} RETURNING {_pg.wake_sql('key')}" if self.postgres else update
        self.channel = _pg.channel_for(schema)
        self.schema = schema
        self._idle: deque[_Conn] = deque()
        self._count = 0  # connections open, idle or in use
        self._lock = threading.Lock()
        self._forks = _forks
        self._open_for_use = True

    @property
    def usable(self) -> bool:
        """False while anyone listens to the engine's statements or transactions (they must see
        each one)."""
        d = self.engine.dispatch  # asked before every statement: spelled out, no generator
        return not (
            d.before_execute
            or d.after_execute
            or d.before_cursor_execute
            or d.after_cursor_execute
            or d.commit
            or d.rollback
        )

    # -- the statements ---------------------------------------------------------------------

    def claim(self, params: tuple[Any, ...], key: str) -> _Claimed | None:
        """Write the intent: ``(1, ())`` when it is ours to run, ``(0, row)`` for the row that
        exists, None when the long path must decide (a race, or no row in sight).

        PostgreSQL's insert reads the row it meets in the same statement. SQLite reads it after
        the insert met it: not before, since a caller expecting a repeat has just asked
        ``recorded``, and in a run writing new actions that read would find nothing, at about
        a tenth of a fresh effect's time."""
        if self.postgres:
            return self._run(lambda cur: self._claim_pg(cur, params, key), busy=None)
        return self._run(lambda cur: self._claim_sqlite(cur, params, key), busy=None)

    def _claim_pg(self, cur: Any, params: tuple[Any, ...], key: str) -> _Claimed | None:
        got = cur.execute(self.claim_sql, (*params, key)).fetchone()
        if got[0] is not None:
            return (int(got[0]), ())
        return (0, tuple(got[1:])) if got[1] is not None else None

    def _claim_sqlite(self, cur: Any, params: tuple[Any, ...], key: str) -> _Claimed | None:
        with _forkgate.WRITES:
            cur.execute("BEGIN IMMEDIATE")
            got = cur.execute(self.insert_sql, params).fetchone()
            cur.execute("COMMIT" if got is not None else "ROLLBACK")
        if got is not None:
            return (int(got[0]), ())
        row = cur.execute(self.select_sql, (key,)).fetchone()  # the row it met, lock released
        return (0, tuple(row)) if row is not None else None

    def finish(
        self, key: str, attempt: int, state: str, result: str | None, error: str | None,
        note: str | None,
    ) -> bool:  # fmt: skip
        """Record the outcome of the current attempt; False when it matched no open row (the
        caller looks closer: fenced off, or an earlier try that landed)."""
        values = (state, result, error, note, key, attempt)
        if self.postgres:
            wake = (_pg.lock_id(self.schema, key), self.channel)
            sql = self.finish_sql
            return bool(
                self._run(lambda cur: cur.execute(sql, (*values, *wake)).fetchone(), busy=False)
            )
        return self._run(lambda cur: self._finish_sqlite(cur, values), busy=False)

    def _finish_sqlite(self, cur: Any, values: tuple[Any, ...]) -> bool:
        with _forkgate.WRITES:
            cur.execute("BEGIN IMMEDIATE")
            done: bool = cur.execute(self.finish_sql, values).rowcount == 1
            cur.execute("COMMIT" if done else "ROLLBACK")
        return done

    def recorded(self, key: str) -> str | None:
        """The recorded result of ``key`` if it has succeeded (and its result is kept), in one
        plain read; None otherwise, or if every connection is in use. Only a succeeded row is
        final (no rule moves an action out of it), so only it may answer a call from a read;
        the claim judges every other case."""
        found = self._run(lambda cur: cur.execute(self.result_sql, (key,)).fetchone(), busy=None)
        return None if found is None else cast(str, found[0])

    def row(self, key: str) -> tuple[Any, ...] | object | None:
        """The row of ``key`` and the database clock, in one plain read (``BUSY``: ask the long
        path)."""
        found = self._run(lambda cur: cur.execute(self.select_sql, (key,)).fetchone(), busy=BUSY)
        return tuple(found) if found is not None and found is not BUSY else found

    # -- the connection ---------------------------------------------------------------------

    def _run(self, work: Callable[[Any], T], *, busy: Any) -> T:
        """``work(cursor)`` on one of this path's connections; ``busy`` when all are in use
        (the caller then takes the long path, whose pool bounds and queues). A driver fault is
        raised as the ``DBAPIError`` SQLAlchemy would raise, so the store's ``db_faults`` and
        ``transient`` judge both paths alike; the connection it happened on is closed."""
        conn = None
        try:
            conn = self._take()
            if conn is None:
                return cast(T, busy)
            found = work(conn[1])
        except self._driver_error as exc:
            dialect = self.engine.dialect
            gone = conn is not None and dialect.is_disconnect(exc, conn[0], None)
            if conn is not None:
                self._discard(conn)  # it may hold a half-done transaction
            raise DBAPIError.instance(
                None, None, exc, self._driver_error, connection_invalidated=gone, dialect=dialect
            ) from exc
        except BaseException:
            if conn is not None:
                self._discard(conn)
            raise
        self._give_back(conn)
        return found

    # Connections are opened the engine's way (its connect arguments and events), then taken
    # out of its pool and kept here in autocommit: no checkout, reset or isolation switch per
    # statement. At most SIZE exist; a thread finding them all in use takes the long path.
    # Each keeps one cursor for its lifetime (a driver cursor is cheap to reuse, not to make).
    SIZE = 8

    def _take(self) -> _Conn | None:
        """An idle connection, a new one while fewer than SIZE exist, else None."""
        if self._forks != _forks:
            # Forked: those belong to the parent. Kept referenced, never closed or collected
            # here, since closing a copy would say goodbye to the server on the parent's behalf.
            _INHERITED.extend(self._idle)
            self._idle, self._forks, self._count = deque(), _forks, 0
        while True:
            try:
                conn = self._idle.pop()
            except IndexError:
                return self._open()
            if not self._stale(conn):
                return conn
            self._discard(conn)

    def _open(self) -> _Conn | None:
        with self._lock:
            if self._count >= self.SIZE:
                return None
            self._count += 1
        try:
            raw = self.engine.raw_connection()
        except BaseException:
            with self._lock:
                self._count -= 1
            raise
        driver: Any = raw.driver_connection
        raw.detach()
        try:
            if self.postgres:
                driver.autocommit = True
                return (driver, driver.cursor(), _db.socket_poll(driver.pgconn.socket))
            return (driver, driver.cursor(), None)
        except BaseException:
            self._discard((driver, None, None))
            raise

    def _discard(self, conn: _Conn) -> None:
        _close(conn[0])
        with self._lock:
            self._count -= 1

    def _stale(self, conn: _Conn) -> bool:
        """Closed, or (PostgreSQL) a goodbye from the server waits unread (restart, failover,
        idle timeout): such a connection would fail the next statement."""
        if not self.postgres:
            return False
        driver, _, poller = conn
        if driver.closed:  # broken implies closed; libpq closes a socket only after saying so
            return True
        try:
            if poller is not None:
                return bool(poller.poll(0))
            return _db.has_input(driver.pgconn.socket)
        except Exception:  # noqa: BLE001 - libpq knows the socket is gone
            return True

    def _give_back(self, conn: _Conn) -> None:
        if self._open_for_use and self._forks == _forks:
            self._idle.append(conn)
        else:
            self._discard(conn)

    def close(self) -> None:
        """Close the idle connections; those in use are closed as they come back."""
        self._open_for_use = False
        while self._idle:
            self._discard(self._idle.pop())


def _close(driver: Any) -> None:
    with contextlib.suppress(Exception):
        driver.close()
