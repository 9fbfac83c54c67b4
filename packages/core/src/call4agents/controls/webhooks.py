"""Signed webhook deliveries that never hold up an agent, the console or another event.

Each receiver has its own bounded queue and a few delivery threads, so a receiver that hangs
holds at most its own threads; the others, and every agent, go on. A post is retried with
back-off; an event given up on (every attempt failed, or the receiver's queue was full) is written
to the ledger as a dead letter, never dropped unseen: ``call4agents webhooks`` lists them,
``--replay`` posts them again, and ``stats`` and the console count them.

The receiver checks ``X-Call4Agents-Signature: sha256=<hex>``, the HMAC of
``<X-Call4Agents-Timestamp>.<body>`` with the shared secret, and may refuse old timestamps. Every
event carries an ``id`` that stays the same when it is retried or replayed, to drop repeats by.
Events are delivered concurrently, so their order is not kept.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import queue
import smtplib
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass
from typing import Any
from urllib.parse import SplitResult, parse_qs, unquote, urlsplit, urlunsplit

from call4agents.controls import notices
from call4agents.engine.ledger_core import LedgerCore
from call4agents.model.errors import Call4AgentsError, ConfigurationError
from call4agents.storage import dead_letters
from call4agents.storage._db import DatabaseFault
from call4agents.storage.dead_letters import DeadLetter

Event = dict[str, Any]


@dataclass(frozen=True)
class Delivery:
    """How hard to try one receiver."""

    attempts: int = 6
    backoff: float = 1.0  # then doubled: 1, 2, 4, 8, 16 seconds between attempts
    timeout: float = 10.0  # seconds one post may take
    workers: int = 4  # posts in flight to one receiver at once (0: events only queue)
    queue_size: int = 1000  # events waiting for one receiver; past it, dead letters


@dataclass(frozen=True)
class Receiver:
    """Where events go, from one ``--webhook-url``: an ``http(s)://`` URL gets the signed JSON
    event, credentials in it (``user:pass@``) sent as HTTP Basic auth; ``slack+https://...`` a
    Slack incoming-webhook message; ``smtp://[user:pass@]host[:port]?from=A&to=B[&to=C]
    [&starttls=1]`` an email to each ``to``."""

    url: str  # what logs, dead letters and pages show: no password, no Slack hook secret
    authorization: str | None = None
    style: str = "json"  # json | slack | email
    target: str = ""  # the Slack hook's real URL (it is a secret), or the SMTP host:port
    sender: str = ""
    to: tuple[str, ...] = ()
    starttls: bool = False
    login: tuple[str, str] | None = None

    @classmethod
    def parse(cls, url: str) -> Receiver:
        parts = urlsplit(url.strip())
        if parts.scheme == "smtp":
            return _smtp(url, parts)
        slack = parts.scheme in ("slack+http", "slack+https")
        scheme = parts.scheme.removeprefix("slack+")
        if scheme not in ("http", "https") or not parts.hostname:
            raise ConfigurationError(
                f"--webhook-url {_shown(url)!r} is not an http(s)://, slack+https:// or smtp:// "
                "address with a host name"
            )
        auth = None
        if parts.username is not None or parts.password is not None:
            pair = f"{unquote(parts.username or '')}:{unquote(parts.password or '')}"
            auth = "Basic " + base64.b64encode(pair.encode()).decode()
        host = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
        netloc = host + (f":{parts.port}" if parts.port else "")
        plain = urlunsplit((scheme, netloc, parts.path or "/", parts.query, ""))
        if slack:
            # The hook's path is its credential: shown by a digest that tells hooks apart.
            mark = hashlib.sha256(plain.encode()).hexdigest()[:10]
            return cls(f"slack+{scheme}://{netloc}/...{mark}", auth, "slack", plain)
        return cls(plain, auth)


def _smtp(url: str, parts: SplitResult) -> Receiver:
    query = parse_qs(parts.query)
    sender, to = (query.get("from") or [""])[0], tuple(query.get("to") or ())
    if not parts.hostname or not sender or not to:
        raise ConfigurationError(
            f"--webhook-url {_shown(url)!r}: an smtp:// address needs a host, from= and at least "
            "one to=, as in smtp://mail.example.com:587?from=c4a@example.com&to=ops@example.com"
        )
    if any(notices.header_text(a) != a for a in (sender, *to)):
        raise ConfigurationError(
            f"--webhook-url {_shown(url)!r}: from= and to= must be plain addresses, without line "
            "breaks or other control characters"
        )
    port = parts.port or 25
    login = None
    if parts.username is not None:
        login = (unquote(parts.username), unquote(parts.password or ""))
    starttls = (query.get("starttls") or ["0"])[0] in ("1", "true", "yes")
    shown = f"smtp://{parts.hostname}:{port}?to={','.join(to)}"
    return Receiver(shown, None, "email", f"{parts.hostname}:{port}", sender, to, starttls, login)


def _shown(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None:
        return url
    return url.replace(f":{parts.password}@", ":***@", 1)


def sign(secret: bytes, timestamp: str, body: bytes) -> str:
    return (
        "sha256=" + hmac.new(secret, timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    )


class Webhooks:
    """Delivery to one or more receivers; ``start`` it over a ledger, then ``submit`` events."""

    def __init__(
        self, receivers: list[Receiver], secret: bytes, delivery: Delivery | None = None
    ) -> None:
        self.receivers, self._secret = receivers, secret
        self.delivery = delivery or Delivery()
        self._queues = {r.url: queue.Queue[Event](self.delivery.queue_size) for r in receivers}
        self._stop = threading.Event()
        self._ledger: LedgerCore | None = None

    def start(self, ledger: LedgerCore) -> None:
        self._ledger = ledger
        for receiver in self.receivers:
            for _ in range(self.delivery.workers):
                name = "c4a-webhook-delivery"
                threading.Thread(
                    target=self._work, args=(receiver,), name=name, daemon=True
                ).start()

    def stop(self) -> None:
        self._stop.set()

    def submit(self, event: Event) -> None:
        """Queue the event for every receiver; never blocks (a full queue makes a dead letter)."""
        for receiver in self.receivers:
            try:
                self._queues[receiver.url].put_nowait(event)
            except queue.Full:
                self._give_up(receiver, event, "its queue was full (the receiver is too slow)", 0)

    def _work(self, receiver: Receiver) -> None:
        waiting = self._queues[receiver.url]
        while not self._stop.is_set():
            try:
                event = waiting.get(timeout=0.5)
            except queue.Empty:
                continue
            try:
                self.send(receiver, event)
            except Exception as exc:  # noqa: BLE001 - the thread outlives any one event
                print(f"call4agents: webhook delivery failed: {exc!r}", file=sys.stderr)

    def send(self, receiver: Receiver, event: Event, *, keep: bool = True) -> bool:
        """Post one event, retrying with back-off; a dead letter if every attempt failed (unless
        ``keep`` is False: a replayed letter is one already).

        Any failure counts, not only the network's: an event that cannot be built into a message
        (say, a value an email header refuses) is retried and kept like a refused post, so no
        event is dropped unseen and no delivery thread dies of one."""
        error, wait = "", self.delivery.backoff
        for attempt in range(1, self.delivery.attempts + 1):
            try:
                self._post(receiver, event)
                return True
            except OSError as exc:  # refused, timed out, or answered other than 2xx
                error = str(exc) or type(exc).__name__
            except Exception as exc:  # noqa: BLE001 - building the message failed: kept too
                error = f"the message could not be built: {type(exc).__name__}: {exc}"
            if attempt == self.delivery.attempts or self._stop.wait(wait):
                if keep:
                    self._give_up(receiver, event, error, attempt)
                return False
            wait *= 2
        return False

    def _give_up(self, receiver: Receiver, event: Event, error: str, attempts: int) -> None:
        why = notices.header_text(error)  # one line, in the log and in `call4agents webhooks`
        print(
            f"call4agents: webhook {event.get('event')} to {receiver.url} given up after "
            f"{attempts} attempt(s): {why}; kept as a dead letter",
            file=sys.stderr,
        )
        if self._ledger is None:
            return
        try:
            text = json.dumps(event, default=str)
            dead_letters.record(self._ledger.store, receiver.url, text, why, attempts)
        except (Call4AgentsError, DatabaseFault) as exc:  # the one place left to say it
            print(f"call4agents: the dead letter could not be written: {exc}", file=sys.stderr)

    def _post(self, receiver: Receiver, event: Event) -> None:
        if receiver.style == "email":
            self._mail(receiver, event)
            return
        sent = {**event, "sent_at": time.time()}
        body = json.dumps(notices.slack(sent) if receiver.style == "slack" else sent, default=str)
        stamp = str(int(time.time()))
        headers = {
            "Content-Type": "application/json",
            "X-Call4Agents-Timestamp": stamp,
            "X-Call4Agents-Signature": sign(self._secret, stamp, body.encode()),
        }
        if receiver.authorization:
            headers["Authorization"] = receiver.authorization
        request = urllib.request.Request(  # noqa: S310 - parse() allowed http(s) only
            receiver.target or receiver.url, data=body.encode(), method="POST", headers=headers
        )
        with urllib.request.urlopen(  # noqa: S310
            request, timeout=self.delivery.timeout
        ) as answer:
            if answer.status >= 300:
                raise OSError(f"the webhook answered {answer.status}")

    def _mail(self, receiver: Receiver, event: Event) -> None:
        # smtplib's errors are OSErrors: retried and kept as dead letters like a failed post.
        host, _, port = receiver.target.rpartition(":")
        message = notices.email(event, receiver.sender, list(receiver.to))
        with smtplib.SMTP(host, int(port), timeout=self.delivery.timeout) as server:
            if receiver.starttls:
                server.starttls()
            if receiver.login is not None:
                server.login(*receiver.login)
            server.send_message(message)


@dataclass(frozen=True)
class Replayed:
    letter: DeadLetter
    delivered: bool


def replay(
    ledger: LedgerCore, webhooks: Webhooks, *, receiver: str | None = None, limit: int = 1000
) -> list[Replayed]:
    """Post the dead letters again, oldest first, each marked replayed once it is delivered.

    A letter goes to the receiver it was meant for, with that receiver's credentials when
    ``webhooks`` has it (matched by its URL without credentials); ``receiver`` sends them all
    to one URL instead. One that fails again stays a dead letter and is not written twice.
    """
    known = {r.url: r for r in webhooks.receivers}
    done: list[Replayed] = []
    for letter in dead_letters.waiting(ledger.store, limit=limit):
        to = known.get(receiver or letter.receiver) or Receiver.parse(receiver or letter.receiver)
        event = {**json.loads(letter.event), "replayed": True}
        delivered = webhooks.send(to, event, keep=False) and dead_letters.mark_replayed(
            ledger.store, letter.id
        )
        done.append(Replayed(letter, delivered))
    return done
