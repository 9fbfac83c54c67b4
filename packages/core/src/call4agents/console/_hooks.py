"""Webhook notifications: a ticket opened, an action fell in doubt, a run escalated.

The console watches the ledger from its own threads and posts JSON signed with HMAC-SHA256, so
no agent ever waits on a webhook. A failed post is retried with back-off; what still fails is
dropped with a line on stderr. Events carry what the pages show (redacted values masked), never
a secret. Items already open when the console starts are taken as known, not announced.

The receiver checks ``X-Call4Agents-Signature: sha256=<hex>``, the HMAC of
``<X-Call4Agents-Timestamp>.<body>`` with the shared secret, and may refuse old timestamps.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import queue
import sys
import threading
import time
import urllib.request
from typing import Any

from call4agents import Ledger
from call4agents.model.errors import Call4AgentsError
from call4agents.storage._db import DatabaseFault

POLL_SECONDS = 2.0
ATTEMPTS = 6
FIRST_BACKOFF = 1.0  # then doubled: 1, 2, 4, 8, 16 seconds between attempts
TIMEOUT = 10.0


def sign(secret: bytes, timestamp: str, body: bytes) -> str:
    return (
        "sha256=" + hmac.new(secret, timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    )


class Notifier:
    """Two daemon threads: one notices new events, one delivers them in order."""

    def __init__(self, ledger: Ledger, url: str, secret: bytes) -> None:
        self._ledger, self._url, self._secret = ledger, url, secret
        self._events: queue.Queue[dict[str, Any]] = queue.Queue(maxsize=10_000)
        self._stop = threading.Event()
        self._seen: set[str] | None = None
        self.backoff = FIRST_BACKOFF

    def start(self) -> None:
        for target in (self._watch, self._deliver):
            threading.Thread(target=target, name="c4a-console-webhook", daemon=True).start()

    def stop(self) -> None:
        self._stop.set()

    def _watch(self) -> None:
        while not self._stop.is_set():
            try:
                self.poll()
            except (Call4AgentsError, DatabaseFault) as exc:  # the ledger may be down a while
                print(f"call4agents console: webhook watch failed: {exc}", file=sys.stderr)
            self._stop.wait(POLL_SECONDS)

    def poll(self) -> list[dict[str, Any]]:
        """Queue the events not seen before; the first poll only learns what is open."""
        current = self._current()
        first = self._seen is None
        seen = self._seen or set()
        fresh = [event for ident, event in current.items() if ident not in seen]
        self._seen = seen | current.keys()
        if first:
            return []
        for event in fresh:
            self._events.put_nowait(event)
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
        return found

    def _deliver(self) -> None:
        while not self._stop.is_set():
            try:
                event = self._events.get(timeout=0.5)
            except queue.Empty:
                continue
            self.send(event)

    def send(self, event: dict[str, Any]) -> bool:
        """Post one event, retrying with back-off; False if every attempt failed."""
        body = json.dumps({**event, "sent_at": time.time()}, default=str).encode()
        wait = self.backoff
        for attempt in range(1, ATTEMPTS + 1):
            try:
                self._post(body)
                return True
            except OSError as exc:
                if attempt == ATTEMPTS or self._stop.wait(wait):
                    print(
                        f"call4agents console: webhook {event['event']} not delivered after "
                        f"{attempt} attempt(s): {exc}",
                        file=sys.stderr,
                    )
                    return False
                wait *= 2
        return False

    def _post(self, body: bytes) -> None:
        stamp = str(int(time.time()))
        request = urllib.request.Request(  # noqa: S310 - the operator's own URL
            self._url,
            data=body,
            method="POST",
            headers={
                "Content-Type": "application/json",
                "X-Call4Agents-Timestamp": stamp,
                "X-Call4Agents-Signature": sign(self._secret, stamp, body),
            },
        )
        with urllib.request.urlopen(request, timeout=TIMEOUT) as answer:  # noqa: S310
            if answer.status >= 300:
                raise OSError(f"the webhook answered {answer.status}")
