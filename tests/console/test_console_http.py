"""The console over HTTP: sign-in, CSRF, roles, decisions, settling, runs, health, webhooks.

Requests go through Starlette's test client to the real app on a real ledger (both backends);
the browser tests drive the same pages through Chromium.
"""

from __future__ import annotations

import gc
import hashlib
import hmac
import json
import re
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any, ClassVar

import pytest
from sqlalchemy import insert, select
from starlette.testclient import TestClient

import call4agents as c4a
from call4agents.console import ConsoleSettings, check_listen, create_app
from call4agents.console._hooks import Notifier
from call4agents.console._serve import app_to_serve
from call4agents.controls.webhooks import Delivery, Receiver, Webhooks
from call4agents.storage.tables import approvals, effects
from tests.console.helpers import field, make_in_doubt, open_ticket, pay_tool

TOKEN = "t0ken-for-tests"
PROXY = {"proxy_secret_header": "X-Proxy-Secret", "proxy_secret": "from-the-proxy"}


def proxied(ledger: c4a.Ledger, **settings: Any) -> TestClient:
    """Header mode, every request carrying the SSO proxy's shared secret as the proxy adds it."""
    app = create_app(
        ledger, ConsoleSettings(operator="x", user_header="X-User", **PROXY, **settings)
    )
    return TestClient(
        app, base_url="http://127.0.0.1", headers={"X-Proxy-Secret": "from-the-proxy"}
    )


def client(ledger: c4a.Ledger, **settings: Any) -> TestClient:
    values: dict[str, Any] = {"operator": "ann", "token": TOKEN, **settings}
    return TestClient(create_app(ledger, ConsoleSettings(**values)), base_url="http://127.0.0.1")


@pytest.fixture
def ann(ledger: c4a.Ledger) -> Iterator[TestClient]:
    with client(ledger) as signed_in:
        signed_in.get(f"/?token={TOKEN}")
        yield signed_in


def decide(c: TestClient, ticket: str, decision: str, **extra: str) -> Any:
    page = c.get(f"/approvals/{ticket}").text
    form = {"csrf": field(page, "csrf"), "fingerprint": field(page, "fingerprint")}
    return c.post(f"/approvals/{ticket}", data={**form, "decision": decision, **extra})


def test_no_token_is_401_and_the_token_becomes_a_cookie(ledger: c4a.Ledger) -> None:
    with client(ledger) as c:
        assert c.get("/").status_code == 401
        assert c.get("/?token=wrong").status_code == 401
        assert c.get("/api/live").status_code == 401
        signed = c.get(f"/?token={TOKEN}", follow_redirects=False)
        assert signed.status_code == 303
        assert signed.headers["location"] == "/"  # the token leaves the address bar
        assert "httponly" in signed.headers["set-cookie"].lower()
        assert "samesite=strict" in signed.headers["set-cookie"].lower()
        page = c.get("/")
        assert page.status_code == 200
        assert "signed in as <b>ann</b> (operator)" in page.text


def test_pages_send_security_headers(ann: TestClient) -> None:
    page = ann.get("/")
    assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert page.headers["x-frame-options"] == "DENY"
    assert page.headers["cache-control"] == "no-store"
    assert page.headers["referrer-policy"] == "no-referrer"
    assert "cdn" not in page.text.lower()
    assert ann.get("/static/console.js").status_code == 200
    assert ann.get("/static/../_auth.py").status_code == 404


def test_the_inbox_shows_exactly_what_will_run(ann: TestClient, ledger: c4a.Ledger) -> None:
    request = open_ticket()
    page = ann.get("/?view=cards").text
    assert request.ticket in page
    assert "&#34;alice&#34;" in page
    assert "&#34;amount&#34;: 40" in page
    assert "4242" not in page  # the redacted card never reaches a page
    assert "1 value(s) redacted" in page
    assert "refund-7" in page


def test_approve_records_the_signed_in_name_not_a_typed_one(
    ann: TestClient, ledger: c4a.Ledger
) -> None:
    request = open_ticket()
    done = decide(ann, request.ticket, "approve", reason="refund agreed", by="mallory")
    assert done.status_code == 200
    assert "Approved pay in run refund-7" in done.text
    found = ledger.approval(request.ticket)
    assert found is not None
    assert (found.state, found.decided_by, found.reason) == ("approved", "ann", "refund agreed")


def test_no_csrf_token_is_403_and_decides_nothing(ann: TestClient, ledger: c4a.Ledger) -> None:
    request = open_ticket()
    page = ann.get(f"/approvals/{request.ticket}").text
    fp = field(page, "fingerprint")
    for csrf in ({}, {"csrf": "forged"}):
        answer = ann.post(
            f"/approvals/{request.ticket}", data={**csrf, "fingerprint": fp, "decision": "approve"}
        )
        assert answer.status_code == 403
        assert "CSRF" in answer.text
    assert ledger.approvals(state="pending")[0].ticket == request.ticket


def test_a_read_only_user_sees_but_cannot_decide(ledger: c4a.Ledger) -> None:
    request = open_ticket()
    with client(ledger, read_only_users=frozenset({"ann"})) as c:
        c.get(f"/?token={TOKEN}")
        page = c.get("/").text
        assert request.ticket in page
        assert "(read-only)" in page
        assert 'name="decision"' not in page
        # A read-only user's own CSRF token, taken from a page that carries one, still decides
        # nothing: the role is checked on the server.
        with client(ledger) as operator:
            operator.get(f"/?token={TOKEN}")
            token = field(operator.get(f"/approvals/{request.ticket}").text, "csrf")
            fp = field(operator.get(f"/approvals/{request.ticket}").text, "fingerprint")
        answer = c.post(
            f"/approvals/{request.ticket}",
            data={"csrf": token, "fingerprint": fp, "decision": "approve"},
        )
        assert answer.status_code == 403
        assert "read-only" in answer.text
    assert ledger.approvals(state="pending")[0].ticket == request.ticket


def test_role_header_and_user_header(ledger: c4a.Ledger) -> None:
    request = open_ticket()
    with proxied(ledger, role_header="X-Role") as c:
        assert c.get("/").status_code == 401
        viewer = {"X-User": "vic", "X-Role": "viewer"}
        assert "signed in as <b>vic</b> (read-only)" in c.get("/", headers=viewer).text
        page = c.get(f"/approvals/{request.ticket}", headers={"X-User": "olga"}).text
        form = {"csrf": field(page, "csrf"), "fingerprint": field(page, "fingerprint")}
        answer = c.post(
            f"/approvals/{request.ticket}",
            data={**form, "decision": "deny"},
            headers={"X-User": "olga"},
        )
        assert answer.status_code == 200
    found = ledger.approval(request.ticket)
    assert found is not None
    assert (found.state, found.decided_by) == ("denied", "olga")


def test_two_operators_deciding_one_ticket(ledger: c4a.Ledger) -> None:
    request = open_ticket()
    with proxied(ledger) as c:
        forms = {}
        for who in ("olga", "pete"):  # both open the page while the ticket waits
            page = c.get(f"/approvals/{request.ticket}", headers={"X-User": who}).text
            forms[who] = {"csrf": field(page, "csrf"), "fingerprint": field(page, "fingerprint")}
        first = c.post(
            f"/approvals/{request.ticket}",
            data={**forms["olga"], "decision": "approve"},
            headers={"X-User": "olga"},
        )
        second = c.post(
            f"/approvals/{request.ticket}",
            data={**forms["pete"], "decision": "deny"},
            headers={"X-User": "pete"},
        )
    assert first.status_code == 200
    assert second.status_code == 409
    assert "already approved by olga" in second.text
    assert "your decision was not recorded" in second.text
    found = ledger.approval(request.ticket)
    assert found is not None
    assert (found.state, found.decided_by) == ("approved", "olga")


def test_only_if_pending_keeps_the_first_answer_under_a_race(ledger: c4a.Ledger) -> None:
    request = open_ticket()
    ledger.approve(request.ticket, by="olga", only_if_pending=True)
    late = ledger.deny(request.ticket, by="pete", only_if_pending=True)
    assert (late.state, late.decided_by) == ("approved", "olga")


def test_a_stale_or_edited_form_decides_nothing(ann: TestClient, ledger: c4a.Ledger) -> None:
    first = open_ticket("run-a", 40)
    other = open_ticket("run-b", 99999)
    page = ann.get(f"/approvals/{first.ticket}").text
    csrf, fp = field(page, "csrf"), field(page, "fingerprint")
    # The form edited to name another ticket: the fingerprint is of other arguments.
    moved = ann.post(
        f"/approvals/{other.ticket}", data={"csrf": csrf, "fingerprint": fp, "decision": "approve"}
    )
    assert moved.status_code == 409
    assert "not the ones your page showed" in moved.text
    assert {r.ticket for r in ledger.approvals(state="pending")} == {first.ticket, other.ticket}
    ledger.deny(first.ticket, by="bob", reason="duplicate")
    stale = ann.post(
        f"/approvals/{first.ticket}", data={"csrf": csrf, "fingerprint": fp, "decision": "approve"}
    )
    assert stale.status_code == 409
    assert "already denied by bob (duplicate)" in stale.text


def test_an_expired_ticket_is_refused(ann: TestClient, ledger: c4a.Ledger) -> None:
    request = open_ticket(approval_ttl=1.0)  # long enough to load its page on a busy machine
    page = ann.get(f"/approvals/{request.ticket}").text
    form = {"csrf": field(page, "csrf"), "fingerprint": field(page, "fingerprint")}
    time.sleep(max(0.0, request.expires_at - time.time()) + 0.1)
    assert "expired" in ann.get(f"/approvals/{request.ticket}").text
    assert ledger.waiting() == []  # an expired ticket leaves the inbox
    assert request.ticket not in ann.get("/").text
    answer = ann.post(f"/approvals/{request.ticket}", data={**form, "decision": "approve"})
    assert answer.status_code == 409
    assert "expired" in answer.text
    assert "nothing was decided" in answer.text
    found = ledger.approval(request.ticket)
    assert found is not None
    assert found.state == "pending"


def test_unknown_ticket_and_bad_decision_give_a_clear_page(ann: TestClient) -> None:
    missing = ann.get("/approvals/apr_nothing")
    assert missing.status_code == 404
    assert "there is no approval ticket" in missing.text
    assert "apr_nothing" in missing.text
    assert "Traceback" not in missing.text
    request = open_ticket()
    csrf = field(ann.get("/").text, "csrf")
    posted = ann.post("/approvals/apr_nothing", data={"csrf": csrf, "decision": "approve"})
    assert posted.status_code == 404
    odd = ann.post(f"/approvals/{request.ticket}", data={"csrf": csrf, "decision": "maybe"})
    assert odd.status_code == 400
    assert "say approve or deny" in odd.text


def changes_row(page: str, argument: str) -> str:
    table = page.split('<table class="changes">', 1)[1].split("</table>", 1)[0]
    return next(r for r in table.split("<tr>") if f"<code>{argument}</code>" in r)


def test_a_redacted_value_that_changed_is_marked_without_being_shown(
    ann: TestClient, ledger: c4a.Ledger
) -> None:
    first = open_ticket("refund-1", amount=40)
    page = ann.get(f"/approvals/{first.ticket}").text
    assert "The first time this run asks about this tool." in page
    assert decide(ann, first.ticket, "approve").status_code == 200
    # The refund runs on its yes, then the agent asks again: same amount, another card.
    with c4a.run("refund-1"):
        assert pay_tool()(40, "alice") == "paid 40 to alice"  # spends the yes
    assert ledger.approval(first.ticket).state == "spent"  # type: ignore[union-attr]
    other_card = open_ticket("refund-1", amount=40, card="9999-9999-9999-9999")
    page = ann.get(f"/approvals/{other_card.ticket}").text
    assert "What changed since this run last asked" in page
    assert "vs the last ticket, approved (approved by ann)" in page
    assert "differs (redacted: the value is not shown)" in changes_row(page, "card")
    assert ">same<" in changes_row(page, "amount")
    assert ">same<" in changes_row(page, "to")
    for secret in ("9999", "4242", *(other_card.redacted_marks or {}).values()):
        assert secret not in page  # neither card nor its digest reaches the page
    # Now the first card again with another amount, beside a denial and the approved one.
    ledger.deny(other_card.ticket, by="bob", reason="wrong card")
    back = open_ticket("refund-1", amount=45)
    page = ann.get(f"/approvals/{back.ticket}").text
    assert "vs the last ticket (denied by bob)" in page
    assert "vs the last approved (approved by ann)" in page
    card = changes_row(page, "card")
    assert card.count("same (redacted: the value is not shown)") == 1  # as approved
    assert card.count("differs (redacted: the value is not shown)") == 1  # unlike the denied
    assert changes_row(page, "amount").count(">differs<") == 2
    # A ticket from before schema version 13 kept no digest (the one approved, spent long ago,
    # stands in for it): the page says it cannot tell.
    with ledger.store.tx() as conn:
        conn.execute(
            approvals.update().where(approvals.c.ticket == first.ticket).values(redacted_marks=None)
        )
    ledger.deny(back.ticket, by="ann")
    again = open_ticket("refund-1", amount=40, card="4242-0000-0000-0000")
    page = ann.get(f"/approvals/{again.ticket}").text
    assert "cannot tell: redacted, and not comparable" in changes_row(page, "card")


def test_settle_in_doubt_validates_the_json(ann: TestClient, ledger: c4a.Ledger) -> None:
    open_ticket()  # a page with a form, for the CSRF token
    record = make_in_doubt()
    page = ann.get("/doubt").text
    assert record.idempotency_key in page
    assert "the mail server did not answer" in page or "TimeoutError" in page
    # The timed-out attempt left no lease: the card says so instead of "until" and no time.
    assert "lease until )" not in page
    assert "none (no worker holds it)" in page
    csrf = field(page, "csrf")
    bad = ann.post(
        f"/doubt/{record.key}",
        data={"csrf": csrf, "outcome": "happened", "result": "{'id': 1"},
    )
    assert bad.status_code == 400
    assert "not valid JSON" in bad.text
    assert "nothing was recorded" in bad.text
    assert ledger.find(record.key).state == "in_doubt"  # type: ignore[union-attr]
    good = ann.post(
        f"/doubt/{record.key}",
        data={"csrf": csrf, "outcome": "happened", "result": '{"id": "msg-1"}', "note": "seen"},
    )
    assert good.status_code == 200
    settled = ledger.find(record.key)
    assert settled is not None
    assert (settled.state, settled.result, settled.resolved_by) == (
        "succeeded",
        {"id": "msg-1"},
        "ann",
    )
    again = ann.post(f"/doubt/{record.key}", data={"csrf": csrf, "outcome": "did_not_happen"})
    assert again.status_code == 409
    assert "no longer in doubt" in again.text


def test_runs_list_filters_and_run_page(ann: TestClient, ledger: c4a.Ledger) -> None:
    @c4a.effect(name="lookup", kind="write")
    def lookup(order: int) -> dict[str, int]:
        return {"order": order}

    with c4a.run("orders-1"):
        lookup(1)
    make_in_doubt("mail-9")
    everything = ann.get("/runs").text
    assert "orders-1" in everything
    assert "mail-9" in everything
    doubt = ann.get("/runs?state=in_doubt").text
    assert "mail-9" in doubt
    assert "orders-1" not in doubt
    by_tool = ann.get("/runs?tool=lookup").text
    assert "orders-1" in by_tool
    assert "mail-9" not in by_tool
    by_text = ann.get("/runs?q=mail").text
    assert "mail-9" in by_text
    assert "orders-1" not in by_text
    assert ann.get("/runs?state=nonsense").status_code == 400
    assert "orders-1" in ann.get("/runs?active=all").text
    assert ann.get("/runs?active=1y").status_code == 400
    assert [r.run_id for r in ledger.runs(active_within=3600, search="orders")] == ["orders-1"]
    assert ledger.runs(active_within=-60) == []  # no action updated in the future
    run = ann.get("/run?id=orders-1").text
    assert "lookup" in run
    assert "&#34;order&#34;: 1" in run
    assert ann.get("/run?id=nope").status_code == 404


def test_a_settled_then_retried_action_keeps_its_settlement_and_no_false_duration(
    ann: TestClient, ledger: c4a.Ledger
) -> None:
    answered = threading.Event()

    @c4a.effect(name="console.mail", kind="write")
    def mail(to: str) -> str:
        if not answered.is_set():
            raise TimeoutError("the mail server did not answer")
        return f"sent to {to}"

    @c4a.effect(name="console.lookup", kind="write")
    def lookup(order: int) -> int:
        return order

    with c4a.run("retry-1"), pytest.raises(TimeoutError):
        mail("bob@example.com")
    [record] = ledger.in_doubt()
    open_ticket("other-run")  # a page with a form, for the CSRF token
    csrf = field(ann.get("/doubt").text, "csrf")
    form = {"csrf": csrf, "outcome": "did_not_happen", "note": "no trace at the provider"}
    assert ann.post(f"/doubt/{record.key}", data=form).status_code == 200
    time.sleep(0.3)  # time in doubt, which must not read as the tool's own
    answered.set()
    with c4a.run("retry-1"):
        assert mail("bob@example.com") == "sent to bob@example.com"
        lookup(7)
    [done, _] = ledger.effects("retry-1")
    assert (done.state, done.attempt, done.resolved_by) == ("succeeded", 2, None)
    page = ann.get("/run?id=retry-1").text
    rows = page.split("<tr>")[2:]
    mail_row = next(r for r in rows if "console.mail" in r)
    assert "attempt 1: it did not happen, said ann at" in mail_row
    assert "no trace at the provider" in mail_row
    took = re.search(r'data-label="Took">([^<]*)<', mail_row)
    assert took is not None
    assert took.group(1) == ""  # no duration that is really time in doubt
    read_row = next(r for r in rows if "console.lookup" in r)
    assert re.search(r'data-label="Took">\d+\.\d{3}s<', read_row), read_row


def test_undo_from_the_run_page_with_a_confirmation(ann: TestClient, ledger: c4a.Ledger) -> None:
    cancelled: list[str] = []

    def cancel(result: str, **arguments: Any) -> None:
        cancelled.append(result)

    @c4a.effect(name="console.ship", kind="write", undo=cancel)
    def ship(order: int) -> str:
        return f"shipment-{order}"

    with c4a.run("ship-1"):
        ship(5)
    run = ann.get("/run?id=ship-1").text
    assert "/run/undo?id=ship-1" in run
    confirm = ann.get("/run/undo?id=ship-1").text
    assert "Yes, undo run ship-1" in confirm
    assert cancelled == []  # showing the confirmation undoes nothing
    done = ann.post("/run/undo", data={"csrf": field(confirm, "csrf"), "id": "ship-1"})
    assert done.status_code == 200
    assert cancelled == ["shipment-5"]


def test_escalation_handoff_on_the_run_page(ann: TestClient, ledger: c4a.Ledger) -> None:
    with c4a.run("esc-1"), pytest.raises(c4a.Escalated):
        c4a.escalate("customer asked for a person", what_remains=["call them back"])
    page = ann.get("/run?id=esc-1").text
    assert "Escalation hand-off" in page
    assert "call them back" in page


def test_health_and_live(ann: TestClient, ledger: c4a.Ledger) -> None:
    request = open_ticket()
    record = make_in_doubt()
    health = ann.get("/health")
    assert health.status_code == 200
    assert "<svg" in health.text
    assert "Approvals waiting" in health.text
    assert ann.get("/health?since=all").status_code == 200
    assert ann.get("/health?since=forever").status_code == 400
    live = ann.get("/api/live").json()
    assert live["tickets"] == [request.ticket]
    assert live["in_doubt_keys"] == [record.key]
    assert ann.get("/api/live").headers["cache-control"] == "no-store"


def test_a_non_loopback_address_needs_a_proxy() -> None:
    with pytest.raises(ValueError, match="--user-header"):
        check_listen("0.0.0.0", ConsoleSettings(operator="ann", token="t"))
    check_listen("127.0.0.1", ConsoleSettings(operator="ann", token="t"))
    check_listen("::1", ConsoleSettings(operator="ann", token="t"))
    check_listen("0.0.0.0", ConsoleSettings(operator="ann", user_header="X-User", **PROXY))


class _Hook(BaseHTTPRequestHandler):
    received: ClassVar[list[tuple[dict[str, str], bytes]]] = []
    fail_first = 0

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if _Hook.fail_first > 0:
            _Hook.fail_first -= 1
            self.send_response(503)
        else:
            _Hook.received.append((dict(self.headers), body))
            self.send_response(204)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def test_webhooks_are_signed_and_retried(ledger: c4a.Ledger) -> None:
    server = HTTPServer(("127.0.0.1", 0), _Hook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _Hook.received, _Hook.fail_first = [], 2
    try:
        receiver = Receiver.parse(f"http://127.0.0.1:{server.server_port}/")
        notifier = Notifier(ledger, Webhooks([receiver], b"s3cret", Delivery(backoff=0.01)))
        assert notifier.poll() == []  # what is open at start is known, not announced
        request = open_ticket()
        [event] = notifier.poll()
        assert event["event"] == "approval.requested"
        assert event["ticket"] == request.ticket
        assert notifier.webhooks.send(receiver, event)
        make_in_doubt()
        [doubt] = notifier.poll()
        assert doubt["event"] == "action.in_doubt"
        with c4a.run("esc-2"), pytest.raises(c4a.Escalated):
            c4a.escalate("stuck")
        [escalated] = notifier.poll()
        assert escalated["event"] == "run.escalated"
        assert escalated["run_id"] == "esc-2"
        assert notifier.poll() == []
    finally:
        server.shutdown()
    [(headers, body)] = _Hook.received  # two 503s, then delivered once
    expected = hmac.new(
        b"s3cret", headers["X-Call4Agents-Timestamp"].encode() + b"." + body, hashlib.sha256
    ).hexdigest()
    assert headers["X-Call4Agents-Signature"] == "sha256=" + expected
    sent = json.loads(body)
    assert sent["args"]["card"] == "***"
    assert "4242" not in body.decode()


def test_cli_refuses_an_open_address_and_a_newer_ledger(
    ledger: c4a.Ledger, target: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from call4agents.facade import cli
    from call4agents.storage.tables import schema_version

    url = ["--url", ledger.url] + (["--schema", target.schema] if target.schema else [])
    assert cli.main(["console", *url, "--host", "0.0.0.0"]) == cli.EXIT_ERROR
    assert "--user-header" in capsys.readouterr().err
    with ledger.engine.begin() as conn:
        conn.execute(schema_version.update().values(version=999))
    assert cli.main(["console", *url]) == cli.EXIT_ERROR
    err = capsys.readouterr().err
    assert "newer" in err
    assert "Traceback" not in err


def test_a_ledger_that_fails_gives_a_clear_page(ann: TestClient, ledger: c4a.Ledger) -> None:
    from call4agents.storage.tables import approvals

    with ledger.engine.begin() as conn:  # the table gone, as a broken database would lose it
        approvals.drop(conn)
    page = ann.get("/")
    assert page.status_code == 503
    assert "the ledger database failed" in page.text
    assert "Traceback" not in page.text


def test_runs_are_the_latest_and_counted_in_full(ledger: c4a.Ledger) -> None:
    # More recent actions of one run than the ledger reads in one step of its scan: the older
    # runs are still found, newest first, each counted in full.
    @c4a.effect(name="step", kind="write")
    def step(n: int) -> int:
        return n

    for run_id in ("old-1", "old-2", "old-3"):
        with c4a.run(run_id):
            step(0)
            step(1)
    with c4a.run("busy"):
        step(0)
    # The busy run's other 2,099 actions are copies of its first, each with a key of its own,
    # written in one statement: called one by one they took most of the test (a minute on
    # PostgreSQL on a busy machine), and the runs' scan reads these rows alone.
    with ledger.engine.begin() as conn:
        [first] = conn.execute(select(effects).where(effects.c.run_id == "busy")).mappings()
        copy = {name: value for name, value in first.items() if name != "seq"}
        later = [
            {
                **copy,
                "key": hashlib.sha256(f"busy-{n}".encode()).hexdigest(),
                "created_at": copy["created_at"] + n * 0.001,
                "updated_at": copy["updated_at"] + n * 0.001,
            }
            for n in range(1, 2100)
        ]
        conn.execute(insert(effects), later)
    found = ledger.runs(limit=3)
    assert [r.run_id for r in found] == ["busy", "old-3", "old-2"]
    assert [r.actions for r in found] == [2100, 2, 2]
    assert [r.run_id for r in ledger.runs(limit=10, search="old")] == ["old-3", "old-2", "old-1"]
    assert ledger.runs(limit=10, tool="nothing") == []


def test_a_run_waiting_for_a_person_is_listed_so(ann: TestClient, ledger: c4a.Ledger) -> None:
    @c4a.effect(name="open_case", kind="write")
    def open_case(order: str) -> str:
        return f"case-{order}"

    with c4a.run("refund-7"):
        open_case("A-1")
    open_ticket("refund-7")
    assert ledger.waiting_by_run(["refund-7", "other"]) == {"refund-7": 1}
    listed = ann.get("/runs?state=waiting_approval").text
    assert "refund-7" in listed
    assert "waiting approval" in listed


def test_a_run_whose_only_record_is_a_waiting_ticket_is_listed(
    ann: TestClient, ledger: c4a.Ledger
) -> None:
    # The agent stopped at its very first tool call: no action row, only the ticket.
    request = open_ticket("first-call-9")
    assert ledger.effects("first-call-9") == []
    assert ledger.runs() == []  # the engine lists it when asked to, as the CLI's runs does
    assert [r.run_id for r in ledger.runs(waiting=True)] == ["first-call-9"]
    listed = ann.get("/runs").text
    assert 'href="/run?id=first-call-9"' in listed
    assert ann.get("/runs?state=waiting_approval").text.count("first-call-9") >= 1
    assert "first-call-9" in ann.get("/runs?tool=pay").text
    assert "first-call-9" not in ann.get("/runs?tool=other").text
    assert "first-call-9" not in ann.get("/runs?q=nomatch").text
    assert "first-call-9" not in ann.get("/runs?state=done").text
    run_page = ann.get("/run?id=first-call-9").text
    assert request.ticket in run_page


def test_the_inbox_says_which_policy_asked_and_the_tools_kind(ann: TestClient) -> None:
    request = open_ticket()
    card = ann.get(f"/approvals/{request.ticket}").text
    assert '<span class="kind">irreversible</span>' in card  # before the tool ever ran
    assert "approval=True" in card


def test_health_charts_each_figure_over_time(ann: TestClient, ledger: c4a.Ledger) -> None:
    import re

    open_ticket()
    make_in_doubt()
    for window, buckets in (("1h", 12), ("24h", 24), ("7d", 28), ("all", 28)):
        page = ann.get(f"/health?since={window}")
        assert page.status_code == 200
        text = page.text
        for chart in (
            "irreversible",
            "unapproved",
            "dedup",
            "in-doubt",
            "waiting",
            "waiting-age",
            "escalation-age",
            "cost-p95",
            "cost-p99",
        ):
            assert f'id="chart-{chart}"' in text, (window, chart)
        assert f"in {buckets} buckets" in text
        # Executed without a yes is on the page, and zero here.
        assert re.search(
            r"executed without a yes \(must stay 0\)</td><td[^>]*><b class=\"zero\">0<", text
        )
        # Inline SVG only: no inline script or style for the CSP to refuse.
        assert "<script>" not in text
        assert "style=" not in text
    waiting = ann.get("/health?since=1h").text
    chart = waiting[waiting.index('id="chart-waiting"') :]
    assert "Approvals waiting: <b>1</b>" in chart[:400]
    doubt = waiting[waiting.index('id="chart-in-doubt"') :]
    assert "Open in doubt: <b>1</b>" in doubt[:400]


def test_the_served_app_sets_what_was_loaded_aside_from_the_collector(ledger: c4a.Ledger) -> None:
    # `call4agents console` serves this app: what was loaded before it (the ledger, SQLAlchemy,
    # the driver) is frozen, so a page's full collections no longer walk it; the pages still work.
    gc.unfreeze()
    try:
        app = app_to_serve(ledger, ConsoleSettings(operator="ann", token="t"))
        assert gc.get_freeze_count() > 0
        with TestClient(app, base_url="http://127.0.0.1") as client:
            assert client.get("/health?token=t").status_code == 200
    finally:
        gc.unfreeze()
