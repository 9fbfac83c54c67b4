"""Counting repeats served from the record, without slowing them down.

A repeat costs microseconds and writes nothing to its action's row, so it cannot afford a
database write of its own. Each one is noted in memory (one list append, no lock), folded into
per-tool counts under a lock now and then; a timer adds the counts to ``c4a_dedup_hits`` a few
seconds later in one short transaction, and
``Ledger.close()`` and interpreter exit add what is left. A process killed with SIGKILL loses at
most the last few seconds of counts: a health figure, never part of the once-only guarantee.
"""

from __future__ import annotations

import atexit
import contextlib
import threading
import weakref
from collections import Counter
from typing import TYPE_CHECKING

from sqlalchemy import update

from call4agents.model import platform
from call4agents.model.errors import LedgerError

from .store import clock, dialect_insert
from .tables import dedup_hits

if TYPE_CHECKING:
    from .store import Store

FLUSH_AFTER = 5.0  # seconds a count may wait in memory
_MAX_PENDING_TOOLS = 10_000  # while the database is down, keep counting but bound the memory
_FOLD_AT = 10_000  # repeats noted before they are folded into counts: bounds the list


class DedupCounter:
    """Repeats served from the record, per tool, on their way to ``c4a_dedup_hits``."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._lock = threading.Lock()
        # One entry per repeat. Appending is atomic and needs no lock (a third of a repeat's
        # cost went on taking one); only _fold removes entries, from the front, under the lock,
        # so an entry appended meanwhile is never lost.
        self._noted: list[str] = []
        self._pending: Counter[str] = Counter()  # folded counts, under the lock
        # Whether this process's flush timer is armed. A fork's child has no timer thread (and
        # maybe a lock some other thread held): _after_fork starts it afresh. Kept as a flag
        # rather than comparing os.getpid() on each repeat, which is a system call.
        self._armed = False
        _counters.add(self)

    def add(self, tool: str) -> None:
        noted = self._noted
        noted.append(tool)
        if not self._armed or len(noted) >= _FOLD_AT:
            self._settle()

    def _settle(self) -> None:
        with self._lock:
            self._fold()
            if not self._armed:
                self._armed = True
                timer = threading.Timer(FLUSH_AFTER, self._flush_quietly)
                timer.daemon = True
                timer.start()

    def _fold(self) -> None:
        """Move the repeats noted so far into the counts (the caller holds the lock)."""
        noted = self._noted
        taken = len(noted)
        if not taken:
            return
        pending = self._pending
        for tool, hits in Counter(noted[:taken]).items():
            if tool in pending or len(pending) < _MAX_PENDING_TOOLS:
                pending[tool] += hits
        del noted[:taken]

    def flush(self) -> None:
        """Add the counts held in memory to the ledger now."""
        with self._lock:
            self._fold()
            pending, self._pending = self._pending, Counter()
            self._armed = False
        if not pending:
            return
        try:
            self._write(pending)
        except LedgerError:
            with self._lock:  # the database is away: keep them for the next flush
                self._pending.update(pending)
            raise

    def _flush_quietly(self) -> None:
        with contextlib.suppress(LedgerError):  # kept in memory; the next repeat tries again
            self.flush()

    def _write(self, pending: Counter[str]) -> None:
        store = self._store
        insert = dialect_insert(store.dialect)
        with store.tx() as conn:
            minute = int(clock(conn) // 60)
            for tool, hits in sorted(pending.items()):  # one lock order for concurrent flushes
                conn.execute(
                    insert(dedup_hits)
                    .values(tool=tool, minute=minute, hits=0)
                    .on_conflict_do_nothing(index_elements=["tool", "minute"])
                )
                conn.execute(
                    update(dedup_hits)
                    .where(dedup_hits.c.tool == tool, dedup_hits.c.minute == minute)
                    .values(hits=dedup_hits.c.hits + hits)
                )


_counters: weakref.WeakSet[DedupCounter] = weakref.WeakSet()


def _after_fork() -> None:
    """In a fork's child: no timer runs there, a lock held at the fork stays held, and the
    counts held are the parent's, which the parent adds itself."""
    for counter in list(_counters):
        counter._lock = threading.Lock()
        counter._noted = []
        counter._pending = Counter()
        counter._armed = False


platform.at_fork(after_in_child=_after_fork)


@atexit.register
def _flush_at_exit() -> None:
    for counter in list(_counters):
        counter._flush_quietly()
