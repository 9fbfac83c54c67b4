"""A fork waits for this process's SQLite write transactions to end.

SQLite keeps the locks of every connection a process has on a file in one table per process
(POSIX locks belong to the process, not to a connection). ``os.fork`` copies that table: if
another thread held the write lock at that moment, the child's table says the lock is still
held, by a connection the child does not have, and no connection the child opens on that file
can ever take it. Its first write waits out the busy timeout and fails with "database is
locked", whatever the parent did meanwhile.

So every SQLite write transaction of the engine and the hot path is counted here, and a fork
(``os.fork``, multiprocessing's fork start method; not ``subprocess``, which runs no fork
handlers) first waits until none of another thread is open, holding new ones back until the
fork is done. The wait is bounded: a transaction still open after ``LIMIT`` seconds (one stuck
behind another process's lock) lets the fork go on, as it did before.
"""

from __future__ import annotations

import threading

from call4agents.model import platform

# Seconds a fork waits at most for open write transactions (the default busy timeout).
LIMIT = 30.0


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
