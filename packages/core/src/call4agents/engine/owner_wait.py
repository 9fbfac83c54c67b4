"""Waiting, bounded, while another live worker runs an action: a sync and an async loop.

Both walk the same steps. The row is read again when the outcome's notification wakes the wait
(PostgreSQL, see _pg), when the lease would end, and every few seconds in case a wake-up went
missing; until the database has promised to wake us, and on SQLite, the wait polls with backoff.
The async loop does its database work in a thread but sleeps on the event loop, so a crowd of
waiters never holds the threads that the worker they wait for needs to write its result.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

from call4agents.model.errors import EffectInProgress, LedgerError
from call4agents.storage._pg import Watch
from call4agents.storage.store import Row

from . import _owner

if TYPE_CHECKING:
    from .action import Action

# How often a waiter that will be woken by the outcome reads the row anyway.
RECHECK_WHILE_TOLD = 5.0
_FIRST_PAUSE, _MAX_PAUSE = 0.005, 0.25


class _Wait:
    """One wait's state; ``next_sleep`` and ``reread`` do database work, nothing else does."""

    def __init__(self, action: Action, row: Row, watch: Watch, wait: float) -> None:
        self.action, self.row, self.watch, self.wait = action, row, watch, wait
        self.store = action.ledger.store
        self.deadline = time.monotonic() + wait
        self.pause = _FIRST_PAUSE
        self.told = False  # the last read came after a finisher was bound to wake us

    def next_sleep(self) -> float | None:
        """None once the row is no longer running, else how long to sleep before reading again."""
        row, key = self.row, self.action.key
        if row.state != "started":
            return None
        try:
            lapsed, mark = not row.lease_live, self.store.mark_in_doubt
            if _owner.judge(key, row.attempt, row.owner, lapsed, mark) is not None:
                return 0.0  # judged (moved by us or by another): read what it is now
        except LedgerError as exc:
            self._tolerate(exc)
            return self._backoff()
        if time.monotonic() >= self.deadline:
            raise EffectInProgress(
                key=key,
                run_id=self.action.run_id,
                tool=self.action.tool,
                owner=_owner.describe(row.owner),
                waited=self.wait,
            )
        if self.told and row.lease_live:
            # Both ends of the lease are the database's clock: only their difference is used.
            lease_left = (row.lease_expires_at or row.now) - row.now
            left = self.deadline - time.monotonic()
            return max(0.0, min(left, lease_left + 0.01, RECHECK_WHILE_TOLD))
        return self._backoff()

    def reread(self) -> bool:
        """Read the row again; False if it is gone (gc of a failed row: claim afresh)."""
        self.told = self.watch.guarded  # before the read: a promise made after it covers less
        try:
            fresh = self.store.get(self.action.key)
        except LedgerError as exc:
            self._tolerate(exc)
            self.told = False
            return True
        if fresh is None:
            return False
        self.row = fresh
        return True

    def _tolerate(self, exc: LedgerError) -> None:
        # The database blinked (a restart, a failover): go on waiting on what we knew, within
        # the same bounded wait.
        if not self.store.transient(exc) or time.monotonic() >= self.deadline:
            raise exc

    def _backoff(self) -> float:
        sleep = max(0.0, min(self.pause, self.deadline - time.monotonic()))
        self.pause = min(self.pause * 2, _MAX_PAUSE)
        return sleep


def _wait_seconds(action: Action) -> float:
    given = action.options.wait
    return given if given is not None else action.ledger.wait


def wait_while_live(action: Action, row: Row) -> Row:
    """The row once no live worker runs it; EffectInProgress if that takes over ``wait``."""
    if row.state != "started":
        return row
    wait = _wait_seconds(action)
    with action.ledger.store.watch(action.key, listen=wait > 0) as watch:
        step = _Wait(action, row, watch, wait)
        while (sleep := step.next_sleep()) is not None:
            if sleep > 0:
                watch.wait(sleep)
            if not step.reread():
                break
        return step.row


async def await_while_live(action: Action, row: Row) -> Row:
    """``wait_while_live`` for the event loop: it sleeps there, not in a thread."""
    if row.state != "started":
        return row
    wait = _wait_seconds(action)
    with action.ledger.store.watch(action.key, listen=wait > 0) as watch:
        step = _Wait(action, row, watch, wait)
        while (sleep := await asyncio.to_thread(step.next_sleep)) is not None:
            if sleep > 0:
                await watch.wait_async(sleep)
            if not await asyncio.to_thread(step.reread):
                break
        return step.row
