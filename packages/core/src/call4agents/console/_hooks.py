"""Notifications: a ticket opened, decided or expired; an action fell in doubt or was settled; a
run escalated or reached its budget.

The console watches the ledger from its own thread and hands each new event to
``controls.webhooks`` for delivery (signed JSON, Slack, email), so no agent ever waits on a
notification and no receiver holds up another (see that module for retries and dead letters).
Events carry what the pages show (redacted values masked), never a secret, a link to the console
page to act on, and an ``id`` that stays the same if it is sent again. What is already there when
the console starts is taken as known, not announced. Decisions and settlements are read from the
audit by its ids, so none is missed between two looks and none is announced twice. A state that
came and went between two looks is still announced, before what followed it: a ticket opened
and decided (or expired), an action that fell in doubt and was settled; an escalation or budget
cut is known by the moment it was recorded, so an undo after it does not hide it.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import OrderedDict
from typing import Any
from urllib.parse import quote

from call4agents import ApprovalRequest, EffectRecord, Ledger
from call4agents.controls.webhooks import Webhooks
from call4agents.engine.endings import RunStatus
from call4agents.model.errors import Call4AgentsError
from call4agents.storage._db import DatabaseFault
from call4agents.storage.audit_rows import AuditEntry

POLL_SECONDS = 2.0
AUDIT_READ = 500  # audit entries read per look; more since the last look are paged through
ENDINGS_READ = 1000  # the latest run endings looked at each time
TOLD = 10_000  # ids of events announced lately, so one that shows again is not announced twice


class Notifier:
    """A daemon thread that notices new events and submits them to the webhooks."""

    def __init__(self, ledger: Ledger, webhooks: Webhooks, public_url: str = "") -> None:
        self._ledger, self.webhooks = ledger, webhooks
        self._link = public_url.rstrip("/")
        self._stop = threading.Event()
        self._seen: set[str] | None = None
        self._audited: int | None = None  # the newest audit id already looked at
        self._since = 0.0  # the database clock at the first look
        self._told: OrderedDict[str, None] = OrderedDict()

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
        first = self._seen is None
        if first:
            self._since = self._ledger.store.now()
        current = self._current()
        before = self._seen or set()
        # Only what is still open is remembered: a ticket decided or an action settled leaves
        # the set, so it does not grow with the ledger's history.
        self._seen = set(current)
        decided = self._decisions()
        if first:
            return []
        fresh: list[dict[str, Any]] = []
        for ident, event in current.items():
            if ident in before:
                continue
            if event["event"] == "approval.expired" and "t:" + event["ticket"] not in before:
                fresh.append(self._asked(event["ticket"]))  # opened and expired between looks
            fresh.append(event)
        for entry in decided:
            fresh += self._opened(entry, before)
            fresh.append(self._decision(entry))
        told = [e for e in fresh if e and self._tell(e["id"])]
        for event in told:
            self.webhooks.submit(event)
        return told

    def _tell(self, ident: str) -> bool:
        """Whether the event is new (and remember it as told, the latest TOLD of them)."""
        if ident in self._told:
            return False
        self._told[ident] = None
        if len(self._told) > TOLD:
            self._told.popitem(last=False)
        return True

    def _opened(self, entry: AuditEntry, before: set[str]) -> list[dict[str, Any]]:
        """The opening a decision or settlement answers, when it came and went between looks."""
        if entry.ticket is not None:
            if "t:" + entry.ticket in before or "x:" + entry.ticket in before:
                return []
            return [self._asked(entry.ticket)]
        if f"d:{entry.key}:{entry.attempt}" in before:
            return []
        record = self._ledger.find(entry.key)
        if record is None:
            return []
        return [self._doubted(record, entry.attempt or record.attempt)]

    def _asked(self, ticket: str) -> dict[str, Any]:
        """The ticket's request, for one decided or expired before a look saw it waiting; none
        for a ticket opened before the watch began, or recorded with its answer at once."""
        request = self._ledger.approval(ticket)
        if request is None or request.requested_at < self._since:
            return {}
        return self._request(request, expired=False)

    def _request(self, r: ApprovalRequest, *, expired: bool) -> dict[str, Any]:
        ident = ("x:" if expired else "t:") + r.ticket
        return {
            "id": ident,
            "event": "approval.expired" if expired else "approval.requested",
            "ticket": r.ticket,
            "run_id": r.run_id,
            "tool": r.tool,
            "args": r.args,  # as the ledger shows them: redacted values masked
            "expires_at": r.expires_at,
            "url": self._page(f"/approvals/{r.ticket}"),
        }

    def _doubted(self, d: EffectRecord, attempt: int) -> dict[str, Any]:
        return {
            "id": f"d:{d.key}:{attempt}",
            "event": "action.in_doubt",
            "key": d.key,
            "run_id": d.run_id,
            "tool": d.tool,
            "attempt": attempt,
            "why": d.note or d.error,
            "idempotency_key": d.idempotency_key,
            "url": self._page(f"/doubt#k{d.key[:12]}"),
        }

    def _decisions(self) -> list[AuditEntry]:
        """Audit entries newer than the last look, oldest first."""
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
        return list(reversed(newer))

    def _decision(self, e: AuditEntry) -> dict[str, Any]:
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
        now = time.time()
        found = [
            self._request(r, expired=not r.is_open(now))
            for r in self._ledger.approvals(state="pending")
        ]
        found += [self._doubted(d, d.attempt) for d in self._ledger.in_doubt()]
        for s in self._ledger.endings(limit=ENDINGS_READ):
            found += _endings(s, self._page(f"/run?id={quote(s.run_id, safe='')}"))
        return {event["id"]: event for event in found}


def _endings(s: RunStatus, url: str | None) -> list[dict[str, Any]]:
    """The escalation and the budget cut a run's ending records, each known by when it was
    recorded (``run_controls.write_status`` stamps every section)."""
    found = []
    escalation, budget = s.details.get("escalation"), s.details.get("budget")
    if isinstance(escalation, dict):
        found.append(
            {
                "id": f"e:{s.run_id}:{escalation['at']}",
                "event": "run.escalated",
                "run_id": s.run_id,
                "reason": escalation.get("reason", s.reason),
                "url": url,
            }
        )
    if isinstance(budget, dict):
        found.append(
            {
                "id": f"b:{s.run_id}:{budget['at']}",
                "event": "run.budget_exceeded",
                "run_id": s.run_id,
                "reason": budget.get("reason"),
                "detail": budget.get("detail"),
                "url": url,
            }
        )
    return found
