"""Counting repeats served from the record, without slowing them down.

A repeat costs microseconds and writes nothing to its action's row, so it cannot afford a
database write of its own. Each one is noted in memory (one list append, no lock), added up
under a lock now and then; a timer writes the count to the change log (``tally.log_repeats``) a
few seconds later in one short transaction, and ``Ledger.close()`` and interpreter exit write
what is left. A process killed with SIGKILL loses at most the last few seconds of counts: a
health figure, never part of the once-only guarantee.
"""

from __future__ import annotations

import atexit
import contextlib
import threading
import weakref
from typing import TYPE_CHECKING

from call4agents.model import platform
from call4agents.model.errors import LedgerError

from .tally import log_repeats

if TYPE_CHECKING:
    from .store import Store

FLUSH_AFTER = 5.0  # seconds a count may wait in memory
_TAKE_AT = 10_000  # repeats noted before they are added up: bounds the list


class DedupCounter:
    """Repeats served from the record, on their way to the change log."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._lock = threading.Lock()
        # One entry per repeat. Appending is atomic and needs no lock (a third of a repeat's
        # cost went on taking one); only _take removes entries, from the front, under the lock,
        # so an entry appended meanwhile is never lost.
        self._noted: list[None] = []
        self.pending = 0  # repeats added up and not yet written, under the lock
        # Whether this process's flush timer is armed. A fork's child has no timer thread (and
        # maybe a lock some other thread held): _after_fork starts it afresh. Kept as a flag
        # rather than comparing os.getpid() on each repeat, which is a system call.
        self._armed = False
        _counters.add(self)

    def add(self) -> None:
        noted = self._noted
        noted.append(None)
        if not self._armed or len(noted) >= _TAKE_AT:
            self._settle()

    def _settle(self) -> None:
        with self._lock:
            self.take()
            if not self._armed:
                self._armed = True
                timer = threading.Timer(FLUSH_AFTER, self._flush_quietly)
                timer.daemon = True
                timer.start()

    def take(self) -> None:
        """Add the repeats noted so far to ``pending`` (the caller holds the lock)."""
        taken = len(self._noted)
        self.pending += taken
        del self._noted[:taken]

    def flush(self) -> None:
        """Write the count held in memory to the ledger now."""
        with self._lock:
            self.take()
            pending, self.pending = self.pending, 0
            self._armed = False
        if not pending:
            return
        try:
            with self._store.tx() as conn:
                log_repeats(conn, pending)
        except LedgerError:
            with self._lock:  # the database is away: keep them for the next flush
                self.pending += pending
            raise

    def _flush_quietly(self) -> None:
        with contextlib.suppress(LedgerError):  # kept in memory; the next repeat tries again
            self.flush()


_counters: weakref.WeakSet[DedupCounter] = weakref.WeakSet()


def _after_fork() -> None:
    """In a fork's child: no timer runs there, a lock held at the fork stays held, and the
    counts held are the parent's, which the parent writes itself."""
    for counter in list(_counters):
        counter._lock = threading.Lock()
        counter._noted = []
        counter.pending = 0
        counter._armed = False


platform.at_fork(after_in_child=_after_fork)


@atexit.register
def _flush_at_exit() -> None:
    for counter in list(_counters):
        counter._flush_quietly()
