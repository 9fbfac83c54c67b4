"""Webhook notifications: a ticket opened, an action fell in doubt, a run escalated.

The console watches the ledger from its own thread and hands each new event to
``controls.webhooks`` for delivery, so no agent ever waits on a webhook and no receiver holds up
another (see that module for signing, retries and dead letters). Events carry what the pages show
(redacted values masked), never a secret, and an ``id`` that stays the same if it is sent again.
Items already open when the console starts are taken as known, not announced.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

from call4agents import Ledger
from call4agents.controls.webhooks import Webhooks
from call4agents.model.errors import Call4AgentsError
from call4agents.storage._db import DatabaseFault

POLL_SECONDS = 2.0


class Notifier:
    """A daemon thread that notices new events and submits them to the webhooks."""

    def __init__(self, ledger: Ledger, webhooks: Webhooks) -> None:
        self._ledger, self.webhooks = ledger, webhooks
        self._stop = threading.Event()
        self._seen: set[str] | None = None

    def start(self) -> None:
        self.webhooks.start(self._ledger)
        threading.Thread(target=self._watch, name="c4a-console-webhook", daemon=True).start()

    def stop(self) -> None:
        self._stop.set()
        self.webhooks.stop()

    def _watch(self) -> None:
        while not self._stop.is_set():
            try:
                self.poll()
            except (Call4AgentsError, DatabaseFault) as exc:  # the ledger may be down a while
                print(f"call4agents console: webhook watch failed: {exc}", file=sys.stderr)
            self._stop.wait(POLL_SECONDS)

    def poll(self) -> list[dict[str, Any]]:
        """Submit the events not seen before; the first poll only learns what is open."""
        current = self._current()
        first = self._seen is None
        seen = self._seen or set()
        fresh = [event for ident, event in current.items() if ident not in seen]
        self._seen = seen | current.keys()
        if first:
            return []
        for event in fresh:
            self.webhooks.submit(event)
        return fresh

    def _current(self) -> dict[str, dict[str, Any]]:
        found: dict[str, dict[str, Any]] = {}
        for r in self._ledger.approvals(state="pending"):
            found["t:" + r.ticket] = {
                "event": "approval.requested",
                "ticket": r.ticket,
                "run_id": r.run_id,
                "tool": r.tool,
                "args": r.args,  # as the ledger shows them: redacted values masked
                "expires_at": r.expires_at,
            }
        for d in self._ledger.in_doubt():
            found[f"d:{d.key}:{d.attempt}"] = {
                "event": "action.in_doubt",
                "key": d.key,
                "run_id": d.run_id,
                "tool": d.tool,
                "attempt": d.attempt,
                "why": d.note or d.error,
                "idempotency_key": d.idempotency_key,
            }
        for s in self._ledger.endings("escalated"):
            found[f"e:{s.run_id}:{s.updated_at}"] = {
                "event": "run.escalated",
                "run_id": s.run_id,
                "reason": s.reason,
            }
        return {ident: {"id": ident, **event} for ident, event in found.items()}
