"""SQLite's transactions: begun IMMEDIATE unless their connection only reads, and counted so
that a fork waits for this process's write transactions to end.

The engine of an SQLite ledger begins, commits and rolls back through ``begin``, ``commit`` and
``rollback`` below (the dialect's own steps, see ``_db.sqlite_engine``).

SQLite keeps the locks of every connection a process has on a file in one table per process
(POSIX locks belong to the process, not to a connection). ``os.fork`` copies that table: if
another thread held the write lock at that moment, the child's table says the lock is still
held, by a connection the child does not have, and no connection the child opens on that file
can ever take it. Its first write waits out the busy timeout and fails with "database is
locked", whatever the parent did meanwhile.

So every SQLite write transaction of the ledger is counted here, and a fork
(``os.fork``, multiprocessing's fork start method; not ``subprocess``, which runs no fork
handlers) first waits until none of another thread is open, holding new ones back until the
fork is done. The wait is bounded: a transaction still open after ``LIMIT`` seconds (one stuck
behind another process's lock) lets the fork go on, as it did before.
"""

from __future__ import annotations

import threading
from typing import Any

from call4agents.model import platform

# Seconds a fork waits at most for open write transactions (the default busy timeout).
LIMIT = 30.0
# Marks a pooled connection whose write transaction a fork waits for.
WRITER = "c4a_writer"
READS = "c4a_reads"  # the connection only reads until its return to the pool (``reading``)


class _Gate:
    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        # Reentrant: a connection's return to the pool (``leave``) may run from a finalizer in
        # the thread that holds the lock through a fork.
        self._lock = threading.RLock()
        self._ended = threading.Condition(self._lock)
        self._open: dict[int, int] = {}  # open write transactions, by thread
        self._forking = False  # a fork waits: say when a transaction ends

    def enter(self) -> int:
        """A write transaction of this thread begins (before its BEGIN IMMEDIATE); the token
        to ``leave`` with. A few hundred nanoseconds: it is on every write of the hot path."""
        token = threading.get_ident()
        with self._lock:
            self._open[token] = self._open.get(token, 0) + 1
        return token

    def leave(self, token: int) -> None:
        """It ended (after its COMMIT or ROLLBACK, or once its connection went back)."""
        with self._lock:
            left = self._open.get(token, 0) - 1
            if left > 0:
                self._open[token] = left
            else:
                self._open.pop(token, None)
            if self._forking:
                self._ended.notify_all()

    def __enter__(self) -> None:
        """``with WRITES:`` around a write transaction that begins and ends in this thread."""
        self.enter()

    def __exit__(self, *exc: object) -> None:
        self.leave(threading.get_ident())

    def before_fork(self) -> None:
        # Held through the fork: no other thread begins a write transaction meanwhile. The
        # forking thread's own transactions are not waited for (that would never end).
        self._lock.acquire()
        mine = threading.get_ident()
        self._forking = True
        self._ended.wait_for(lambda: not (self._open.keys() - {mine}), timeout=LIMIT)
        self._forking = False

    def after_fork_in_parent(self) -> None:
        self._lock.release()

    def after_fork_in_child(self) -> None:
        # The child has one thread, and none of its parent's transactions.
        self._reset()


WRITES = _Gate()
platform.at_fork(
    before=WRITES.before_fork,
    after_in_parent=WRITES.after_fork_in_parent,
    after_in_child=WRITES.after_fork_in_child,
)


def begin(pooled: Any) -> None:
    """Take the write lock up front: a deferred transaction that reads then writes can fail
    with SQLITE_BUSY without waiting, where an immediate one waits its turn. A connection that
    only reads (``reading``) stays deferred, so WAL lets it run beside a writer."""
    info = pooled.info
    if info.get(READS):
        pooled.driver_connection.execute("BEGIN")
        return
    if WRITER not in info:
        info[WRITER] = WRITES.enter()
    pooled.driver_connection.execute("BEGIN IMMEDIATE")


def commit(pooled: Any) -> None:
    try:
        pooled.commit()
    finally:
        ended(pooled)


def rollback(pooled: Any) -> None:
    try:
        pooled.rollback()
    finally:
        ended(pooled)


def ended(pooled: Any) -> None:
    """Its write transaction ended: a fork need not wait for it. (A connection may stay checked
    out of the pool between transactions, see ``_kept``.)"""
    try:
        token = pooled.info.pop(WRITER, None)
    except NotImplementedError:  # the bare connection SQLAlchemy rolls back as it first connects
        return
    if token is not None:
        WRITES.leave(token)


def reading(conn: Any) -> None:
    """Mark ``conn`` (a Connection of an SQLite ledger) as one that only reads until it goes
    back to the pool: its transactions begin deferred. Nothing on PostgreSQL."""
    if conn.dialect.name == "sqlite":
        conn.connection.info[READS] = True
