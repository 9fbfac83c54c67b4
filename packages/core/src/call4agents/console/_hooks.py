"""Notifications: a ticket opened, decided or expired; an action fell in doubt or was settled; a
run escalated or reached its budget.

The console watches the ledger from its own thread and hands each new event to
``controls.webhooks`` for delivery (signed JSON, Slack, email), so no agent ever waits on a
notification and no receiver holds up another (see that module for retries and dead letters).
Events carry what the pages show (redacted values masked), never a secret, a link to the console
page to act on, and an ``id`` that stays the same if it is sent again. What is already there when
the console starts is taken as known, not announced. Decisions and settlements are read from the
audit by its ids, so none is missed between two looks and none is announced twice.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any
from urllib.parse import quote

from call4agents import Ledger
from call4agents.controls.webhooks import Webhooks
from call4agents.model.errors import Call4AgentsError
from call4agents.storage._db import DatabaseFault

POLL_SECONDS = 2.0
AUDIT_READ = 500  # audit entries read per look; more since the last look are paged through


class Notifier:
    """A daemon thread that notices new events and submits them to the webhooks."""

    def __init__(self, ledger: Ledger, webhooks: Webhooks, public_url: str = "") -> None:
        self._ledger, self.webhooks = ledger, webhooks
        self._link = public_url.rstrip("/")
        self._stop = threading.Event()
        self._seen: set[str] | None = None
        self._audited: int | None = None  # the newest audit id already looked at

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
        # Only what is still open is remembered: a ticket decided or an action settled leaves
        # the set, so it does not grow with the ledger's history.
        self._seen = set(current)
        fresh += self._decisions()
        if first:
            return []
        for event in fresh:
            self.webhooks.submit(event)
        return fresh

    def _decisions(self) -> list[dict[str, Any]]:
        """Audit entries newer than the last look, oldest first, as events."""
        newer, before = [], None
        while True:
            page = self._ledger.audit(before=before, limit=AUDIT_READ)
            newer += [e for e in page if self._audited is None or e.id > self._audited]
            if self._audited is None or len(page) < AUDIT_READ or page[-1].id <= self._audited:
                break
            before = page[-1].id
        if self._audited is None:
            self._audited = newer[0].id if newer else 0
            return []
        if newer:
            self._audited = newer[0].id
        return [self._decision(e) for e in reversed(newer)]

    def _decision(self, e: Any) -> dict[str, Any]:
        common = {"run_id": e.run_id, "tool": e.tool, "by": e.actor, "at": e.at}
        if e.action in ("approved", "denied"):
            event = {
                "event": "approval.decided",
                "ticket": e.ticket,
                "decision": e.action,
                "reason": e.reason,
                **common,
                "url": self._page(f"/approvals/{e.ticket}"),
            }
        else:
            event = {
                "event": "action.settled",
                "key": e.key,
                "outcome": e.action,
                "attempt": e.attempt,
                "note": e.reason,
                **common,
                "url": self._page(f"/run?id={quote(e.run_id, safe='')}"),
            }
        return {"id": f"a:{e.id}", **event}

    def _page(self, path: str) -> str | None:
        return self._link + path if self._link else None

    def _current(self) -> dict[str, dict[str, Any]]:
        found: dict[str, dict[str, Any]] = {}
        now = time.time()
        for r in self._ledger.approvals(state="pending"):
            expired = r.expires_at <= now
            found[("x:" if expired else "t:") + r.ticket] = {
                "event": "approval.expired" if expired else "approval.requested",
                "ticket": r.ticket,
                "run_id": r.run_id,
                "tool": r.tool,
                "args": r.args,  # as the ledger shows them: redacted values masked
                "expires_at": r.expires_at,
                "url": self._page(f"/approvals/{r.ticket}"),
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
                "url": self._page(f"/doubt#k{d.key[:12]}"),
            }
        for s in self._ledger.endings():
            budget = s.details.get("budget")
            if s.status != "escalated" and not budget:
                continue
            found[f"e:{s.run_id}:{s.updated_at}"] = {
                "event": "run.budget_exceeded" if budget else "run.escalated",
                "run_id": s.run_id,
                "reason": s.status if budget else s.reason,
                "detail": budget.get("detail") if isinstance(budget, dict) else None,
                "url": self._page(f"/run?id={quote(s.run_id, safe='')}"),
            }
        return {ident: {"id": ident, **event} for ident, event in found.items()}
