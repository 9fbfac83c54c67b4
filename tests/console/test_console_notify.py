"""Notifications: every event a person may act on, each with its console link, delivered as signed
JSON, as a Slack message to a local receiver and as an email to a local SMTP server.

The receivers are real servers on 127.0.0.1 (http.server and aiosmtpd); nothing is mocked.
"""

from __future__ import annotations

import argparse
import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from email import message_from_bytes
from email.header import decode_header, make_header
from email.message import Message
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any, ClassVar

import pytest
from aiosmtpd.controller import Controller

import call4agents as c4a
from call4agents.console._hooks import Notifier
from call4agents.controls.webhooks import Delivery, Receiver, Webhooks
from call4agents.storage import dead_letters
from tests.console.browser import free_port
from tests.console.helpers import make_in_doubt, open_ticket

PUBLIC = "https://console.example.com"
FAST = Delivery(attempts=2, backoff=0.01, timeout=5)


class _Catch(BaseHTTPRequestHandler):
    posts: ClassVar[list[tuple[str, dict[str, str], bytes]]] = []
    status: ClassVar[int] = 200

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        _Catch.posts.append((self.path, dict(self.headers), body))
        self.send_response(_Catch.status)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def http_port() -> Iterator[int]:
    server = HTTPServer(("127.0.0.1", 0), _Catch)
    _Catch.posts, _Catch.status = [], 200
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_port
    finally:
        server.shutdown()
        server.server_close()


class _Inbox:
    def __init__(self) -> None:
        self.mails: list[tuple[list[str], Message]] = []

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        self.mails.append((list(envelope.rcpt_tos), message_from_bytes(envelope.content)))
        return "250 OK"


@pytest.fixture
def smtp() -> Iterator[tuple[int, _Inbox]]:
    inbox = _Inbox()
    port = free_port()
    controller = Controller(inbox, hostname="127.0.0.1", port=port)
    controller.start()
    try:
        yield port, inbox
    finally:
        controller.stop()


def test_every_event_a_person_acts_on_carries_its_console_link(ledger: c4a.Ledger) -> None:
    notifier = Notifier(ledger, Webhooks([], b"s", FAST), PUBLIC + "/")
    open_ticket("before-start")
    assert notifier.poll() == []  # what is there at start is known, not announced
    waiting = open_ticket("refund-7")
    [asked] = notifier.poll()
    assert (asked["event"], asked["url"]) == (
        "approval.requested",
        f"{PUBLIC}/approvals/{waiting.ticket}",
    )
    ledger.approve(waiting.ticket, by="ann", reason="known customer")
    [decided] = notifier.poll()
    assert {k: decided[k] for k in ("event", "decision", "by", "reason", "ticket", "url")} == {
        "event": "approval.decided",
        "decision": "approved",
        "by": "ann",
        "reason": "known customer",
        "ticket": waiting.ticket,
        "url": f"{PUBLIC}/approvals/{waiting.ticket}",
    }
    short = open_ticket("refund-8", approval_ttl=0.3)
    assert [e["event"] for e in notifier.poll()] == ["approval.requested"]
    time.sleep(0.4)
    [expired] = notifier.poll()
    assert (expired["event"], expired["ticket"]) == ("approval.expired", short.ticket)
    doubt = make_in_doubt("mail-3")
    [fell] = notifier.poll()
    assert (fell["event"], fell["url"]) == ("action.in_doubt", f"{PUBLIC}/doubt#k{doubt.key[:12]}")
    ledger.resolve(doubt.key, happened=False, by="bob", note="no trace at the provider")
    [settled] = notifier.poll()
    assert {k: settled[k] for k in ("event", "outcome", "by", "note", "url")} == {
        "event": "action.settled",
        "outcome": "did_not_happen",
        "by": "bob",
        "note": "no trace at the provider",
        "url": f"{PUBLIC}/run?id=mail-3",
    }

    @c4a.effect(name="console.lookup", kind="write")
    def lookup(order: int) -> int:
        return order

    with c4a.run("spend-1", budget=c4a.Budget(max_tool_calls=1)):
        lookup(1)
        with pytest.raises(c4a.BudgetExceeded):
            lookup(2)
    [cut] = notifier.poll()
    assert (cut["event"], cut["reason"], cut["url"]) == (
        "run.budget_exceeded",
        "step_limit",
        f"{PUBLIC}/run?id=spend-1",
    )
    with c4a.run("esc/1"), pytest.raises(c4a.Escalated):
        c4a.escalate("the customer asked for a person")
    [escalated] = notifier.poll()
    assert (escalated["event"], escalated["url"]) == ("run.escalated", f"{PUBLIC}/run?id=esc%2F1")
    assert notifier.poll() == []  # each once
    every = [asked, decided, expired, fell, settled, cut, escalated]
    assert len({e["id"] for e in every}) == len(every)


def test_decisions_made_faster_than_one_look_are_each_announced_once(ledger: c4a.Ledger) -> None:
    import call4agents.console._hooks as hooks

    notifier = Notifier(ledger, Webhooks([], b"s", FAST), PUBLIC)
    notifier.poll()
    tickets = [open_ticket(f"many-{i}").ticket for i in range(12)]
    notifier.poll()
    for t in tickets:
        ledger.deny(t, by="ann")
    with pytest.MonkeyPatch.context() as m:
        m.setattr(hooks, "AUDIT_READ", 5)  # more decisions than one read holds
        decided = [e for e in notifier.poll() if e["event"] == "approval.decided"]
    assert [e["ticket"] for e in decided] == tickets  # oldest first, none missed, none twice
    assert notifier.poll() == []


def test_a_slack_message_shows_the_exact_arguments_and_hides_the_hook(
    ledger: c4a.Ledger, http_port: int
) -> None:
    hook = f"slack+http://127.0.0.1:{http_port}/services/T0/B0/SECRETPART"
    receiver = Receiver.parse(hook)
    assert "SECRETPART" not in receiver.url
    notifier = Notifier(ledger, Webhooks([receiver], b"s", FAST), PUBLIC)
    notifier.webhooks.start(ledger)
    notifier.poll()
    waiting = open_ticket("refund-7", amount=40)
    [event] = notifier.poll()  # submitted: a delivery thread posts it
    deadline = time.monotonic() + 10
    while not _Catch.posts and time.monotonic() < deadline:
        time.sleep(0.05)
    [(path, headers, body)] = _Catch.posts
    assert path == "/services/T0/B0/SECRETPART"
    assert headers["Content-Type"] == "application/json"
    message = json.loads(body)
    assert message["text"] == "Approval needed: pay in run refund-7"
    kinds = [b["type"] for b in message["blocks"]]
    assert kinds[0] == "header"
    assert "actions" in kinds
    code = next(
        b for b in message["blocks"] if "Exact arguments" in b.get("text", {}).get("text", "")
    )
    shown = code["text"]["text"]
    assert '"amount": 40' in shown
    assert '"card": "***"' in shown
    assert "4242" not in body.decode()
    [button] = next(b for b in message["blocks"] if b["type"] == "actions")["elements"]
    assert button["url"] == f"{PUBLIC}/approvals/{waiting.ticket}"
    # A hook that keeps failing: a dead letter, and the hook's secret is in none of it.
    _Catch.status = 500
    assert not notifier.webhooks.send(receiver, event)
    notifier.webhooks.stop()
    [letter] = dead_letters.waiting(ledger.store, limit=10)
    assert "SECRETPART" not in json.dumps(letter.__dict__, default=str)
    assert letter.receiver == receiver.url


def test_an_email_reaches_a_local_smtp_server_with_the_arguments_and_the_link(
    ledger: c4a.Ledger, smtp: tuple[int, _Inbox]
) -> None:
    port, inbox = smtp
    url = (
        f"smtp://127.0.0.1:{port}?from=c4a%40example.com&to=ops%40example.com&to=lead%40example.com"
    )
    receiver = Receiver.parse(url)
    notifier = Notifier(ledger, Webhooks([receiver], b"s", FAST), PUBLIC)
    notifier.webhooks.start(ledger)  # its delivery threads; the test itself looks for events
    try:
        notifier.poll()
        waiting = open_ticket("refund-7", amount=40)
        notifier.poll()  # submitted; a delivery thread sends it
        deadline = time.monotonic() + 10
        while not inbox.mails and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        notifier.webhooks.stop()
    [(to, mail)] = inbox.mails
    assert to == ["ops@example.com", "lead@example.com"]
    assert mail["Subject"] == "Call4Agents: Approval needed: pay in run refund-7"
    assert mail["From"] == "c4a@example.com"
    text = mail.get_payload(decode=True).decode()  # type: ignore[union-attr]
    assert '"card": "***"' in text
    assert "4242" not in text
    assert f"Open in the console: {PUBLIC}/approvals/{waiting.ticket}" in text
    assert mail["X-Call4Agents-Event-Id"] == f"t:{waiting.ticket}"


def test_an_smtp_server_that_is_down_makes_a_dead_letter_without_the_password(
    ledger: c4a.Ledger,
) -> None:
    port = free_port()  # nothing listens there
    receiver = Receiver.parse(f"smtp://c4a:hunter2@127.0.0.1:{port}?from=a%40x.org&to=b%40x.org")
    assert "hunter2" not in receiver.url
    hooks = Webhooks([receiver], b"s", FAST)
    hooks.start(ledger)
    assert not hooks.send(receiver, {"id": "t:1", "event": "approval.requested", "run_id": "r"})
    hooks.stop()
    [letter] = dead_letters.waiting(ledger.store, limit=10)
    assert letter.attempts == 2
    assert "hunter2" not in json.dumps(letter.__dict__, default=str)


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("smtp://mail.example.com?from=a%40x.org", "needs a host, from= and at least one to="),
        ("smtp://mail.example.com?to=b%40x.org", "needs a host, from= and at least one to="),
        ("ftp://files.example.com/drop", "is not an http(s)://, slack+https:// or smtp://"),
        ("slack+ftp://hooks.example.com/x", "is not an http(s)://, slack+https:// or smtp://"),
    ],
)
def test_a_notification_address_that_cannot_work_is_refused(url: str, said: str) -> None:
    with pytest.raises(c4a.ConfigurationError, match=re.escape(said)):
        Receiver.parse(url)


def test_slack_and_email_need_no_shared_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    from call4agents.facade.cli._doctor import _webhooks

    monkeypatch.delenv("CALL4AGENTS_WEBHOOK_SECRET", raising=False)
    slack_only = argparse.Namespace(
        webhook_url=["slack+https://hooks.example.com/services/x", "smtp://m?from=a%40b&to=c%40d"],
        webhook_secret_env="CALL4AGENTS_WEBHOOK_SECRET",
    )
    assert [r.style for r in _webhooks(slack_only).receivers] == ["slack", "email"]
    signed = argparse.Namespace(**{**vars(slack_only), "webhook_url": ["https://h.example.com/"]})
    with pytest.raises(c4a.ConfigurationError, match="need an HMAC secret"):
        _webhooks(signed)


def _ask(run_id: str, tool: str) -> None:
    @c4a.effect(name=tool, kind="irreversible", approval=True)
    def act(amount: int) -> int:
        return amount

    with c4a.run(run_id), pytest.raises(c4a.ApprovalRequired):
        act(1)


def _wait_for(found: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 30
    while not found() and time.monotonic() < deadline:
        time.sleep(0.05)


def test_run_ids_and_tool_names_with_line_breaks_never_stop_the_email_nor_add_headers(
    ledger: c4a.Ledger, smtp: tuple[int, _Inbox]
) -> None:
    port, inbox = smtp
    receiver = Receiver.parse(f"smtp://127.0.0.1:{port}?from=c4a%40example.com&to=ops%40x.org")
    notifier = Notifier(ledger, Webhooks([receiver], b"s", FAST), PUBLIC)
    notifier.webhooks.start(ledger)
    sly = "r\r\nBcc: thief@evil.org\r\nSubject: pwned"
    try:
        notifier.poll()
        for i in range(6):  # more than a receiver's delivery threads
            _ask(f"{sly}-{i}", "pay\nX-Injected: yes")
        open_ticket("plain-1")
        told = notifier.poll()
        _wait_for(lambda: len(inbox.mails) == len(told))
    finally:
        notifier.webhooks.stop()
    assert len(told) == 7
    assert len(inbox.mails) == 7  # every one went out, the plain one too
    for to, mail in inbox.mails:
        assert to == ["ops@x.org"]  # no Bcc reached the envelope
        assert mail["Bcc"] is None
        assert mail["X-Injected"] is None
        assert mail.get_all("Subject") is not None
        assert len(mail.get_all("Subject") or []) == 1
    subjects = sorted(str(m["Subject"]).replace("\r\n", "") for _, m in inbox.mails)  # unfolded
    assert subjects[0] == "Call4Agents: Approval needed: pay in run plain-1"
    assert "run r\\r\\nBcc: thief@evil.org\\r\\nSubject: pwned-0" in subjects[1]
    assert "pay\\nX-Injected: yes" in subjects[1]
    assert dead_letters.waiting(ledger.store, limit=10) == []


def test_a_subject_beyond_ascii_is_encoded_as_rfc_2047_words(
    ledger: c4a.Ledger, smtp: tuple[int, _Inbox]
) -> None:
    port, inbox = smtp
    receiver = Receiver.parse(f"smtp://127.0.0.1:{port}?from=c4a%40example.com&to=ops%40x.org")
    hooks = Webhooks([receiver], b"s", FAST)
    hooks.start(ledger)
    try:
        event = {"id": "t:1", "event": "approval.requested", "run_id": "Zoë-7", "tool": "payé"}
        assert hooks.send(receiver, event)
    finally:
        hooks.stop()
    [(_, mail)] = inbox.mails
    raw = mail.as_string()
    assert "=?utf-8?" in raw.split("\n\n", 1)[0]  # the header on the wire is ASCII words
    assert str(make_header(decode_header(mail["Subject"]))) == (
        "Call4Agents: Approval needed: payé in run Zoë-7"
    )


def test_an_event_that_cannot_be_built_is_a_dead_letter_and_later_ones_still_go_out(
    ledger: c4a.Ledger,
    target: Any,
    smtp: tuple[int, _Inbox],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from call4agents.controls import webhooks as module
    from call4agents.facade.cli import main

    built = module.notices.email

    def refuse_poison(event: dict[str, Any], sender: str, to: list[str]) -> Message:
        # A fault put in: building the message fails as a header value refused would.
        if str(event.get("run_id", "")).startswith("poison"):
            raise ValueError("Header values may not contain linefeed or carriage return")
        return built(event, sender, to)

    monkeypatch.setattr(module.notices, "email", refuse_poison)
    port, inbox = smtp
    receiver = Receiver.parse(f"smtp://127.0.0.1:{port}?from=c4a%40example.com&to=ops%40x.org")
    hooks = Webhooks([receiver], b"s", Delivery(attempts=2, backoff=0.01, timeout=5, workers=2))
    hooks.start(ledger)
    try:
        for i in range(4):  # more than its delivery threads: each would have died of one
            hooks.submit({"id": f"t:p{i}", "event": "approval.requested", "run_id": f"poison{i}"})
        _wait_for(lambda: len(dead_letters.waiting(ledger.store, limit=10)) == 4)
        hooks.submit({"id": "t:ok", "event": "approval.requested", "run_id": "after"})
        _wait_for(lambda: bool(inbox.mails))
    finally:
        hooks.stop()
    [(_, mail)] = inbox.mails
    assert "run after" in str(mail["Subject"])
    letters = dead_letters.waiting(ledger.store, limit=10)
    given_up = sorted(json.loads(d.event)["run_id"] for d in letters)
    assert given_up == [f"poison{i}" for i in range(4)]
    assert {d.attempts for d in letters} == {2}  # retried like a refused post
    capsys.readouterr()
    schema = ["--schema", target.schema] if target.schema else []
    argv = ["webhooks", "--url", target.url, *schema]
    assert main(argv) == 0
    listed = capsys.readouterr().out
    assert listed.count(receiver.url) == 4
    assert "the message could not be built: ValueError: Header values may not contain" in listed


def test_an_smtp_address_with_a_line_break_is_refused() -> None:
    with pytest.raises(c4a.ConfigurationError, match="without line breaks"):
        Receiver.parse("smtp://m.example.com?from=a%40x.org%0D%0ABcc%3A%20e%40v.org&to=b%40x.org")


def test_states_that_came_and_went_between_two_looks_are_each_announced_once(
    ledger: c4a.Ledger,
) -> None:
    notifier = Notifier(ledger, Webhooks([], b"s", FAST), PUBLIC)
    notifier.poll()
    quick = open_ticket("quick-1")
    ledger.deny(quick.ticket, by="ann", reason="no")
    brief = open_ticket("brief-1", approval_ttl=0.2)
    doubt = make_in_doubt("doubt-1")
    ledger.resolve(doubt.key, happened=True, by="bob", note="it went out")

    @c4a.effect(name="note_down", kind="write", undo=lambda result, **_: None)
    def note_down(text: str) -> str:
        return text

    with c4a.run("esc-1"):
        note_down("started")
        with pytest.raises(c4a.Escalated):
            c4a.escalate("a person must look")
    ledger.undo("esc-1")  # the row says "undone" before the watcher looks
    time.sleep(0.3)
    told = notifier.poll()
    said = [(e["event"], e.get("ticket") or e.get("key") or e["run_id"]) for e in told]
    assert said == [
        ("approval.requested", brief.ticket),
        ("approval.expired", brief.ticket),
        ("run.escalated", "esc-1"),
        ("approval.requested", quick.ticket),
        ("approval.decided", quick.ticket),
        ("action.in_doubt", doubt.key),
        ("action.settled", doubt.key),
    ]
    asked = told[3]
    assert (asked["id"], asked["run_id"], asked["url"]) == (
        f"t:{quick.ticket}",
        "quick-1",
        f"{PUBLIC}/approvals/{quick.ticket}",
    )
    assert told[5]["id"] == f"d:{doubt.key}:{doubt.attempt}"
    assert notifier.poll() == []  # each once
    with c4a.run("esc-1"), pytest.raises(c4a.Escalated):
        c4a.escalate("escalated again after the undo")
    [again] = notifier.poll()
    assert (again["event"], again["reason"]) == ("run.escalated", "escalated again after the undo")
