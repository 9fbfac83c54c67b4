"""Counting repeats served from the record, without slowing them down.

A repeat costs microseconds and writes nothing to its action's row, so it cannot afford a
database write of its own. Each one adds to a counter in memory (one dict update under a lock);
a timer adds the counts to ``c4a_dedup_hits`` a few seconds later in one short transaction, and
``Ledger.close()`` and interpreter exit add what is left. A process killed with SIGKILL loses at
most the last few seconds of counts: a health figure, never part of the once-only guarantee.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import threading
import weakref
from collections import Counter
from typing import TYPE_CHECKING

from sqlalchemy import select, update

from call4agents.model.errors import LedgerError

from .store import dialect_insert, now_sql
from .tables import dedup_hits

if TYPE_CHECKING:
    from .store import Store

FLUSH_AFTER = 5.0  # seconds a count may wait in memory
_MAX_PENDING_TOOLS = 10_000  # while the database is down, keep counting but bound the memory


class DedupCounter:
    """Repeats served from the record, per tool, on their way to ``c4a_dedup_hits``."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._lock = threading.Lock()
        self._pending: Counter[str] = Counter()
        self._timer_pid: int | None = None  # the process whose timer is armed (none after fork)
        _counters.add(self)

    def add(self, tool: str) -> None:
        with self._lock:
            if tool in self._pending or len(self._pending) < _MAX_PENDING_TOOLS:
                self._pending[tool] += 1
            if self._timer_pid != os.getpid():
                self._timer_pid = os.getpid()
                timer = threading.Timer(FLUSH_AFTER, self._flush_quietly)
                timer.daemon = True
                timer.start()

    def flush(self) -> None:
        """Add the counts held in memory to the ledger now."""
        with self._lock:
            pending, self._pending = self._pending, Counter()
            self._timer_pid = None
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
            minute = int(conn.execute(select(now_sql(store.dialect))).scalar_one() // 60)
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


@atexit.register
def _flush_at_exit() -> None:
    for counter in list(_counters):
        counter._flush_quietly()
