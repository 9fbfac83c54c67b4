"""The audit keeps every decision and settlement, whatever the ticket or action does next."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

import pytest
from starlette.testclient import TestClient

import call4agents as c4a
from call4agents.console import ConsoleSettings, create_app
from call4agents.facade import cli
from tests.conftest import Target
from tests.console.helpers import open_ticket


def _in_doubt(ledger: c4a.Ledger, run_id: str, calls: list[str]) -> tuple[Any, str]:
    """A tool that times out once (in doubt), then works; the tool and the action's key."""

    @c4a.effect(name="send_email", kind="write")
    def send_email(to: str) -> str:
        calls.append(to)
        if len(calls) == 1:
            raise TimeoutError("the mail server did not answer")
        return f"sent to {to}"

    with c4a.run(run_id), pytest.raises(TimeoutError):
        send_email("bob@example.com")
    [record] = [r for r in ledger.in_doubt() if r.run_id == run_id]
    return send_email, record.key


def test_a_did_not_happen_settlement_outlives_the_retry_that_succeeds(ledger: c4a.Ledger) -> None:
    calls: list[str] = []
    send_email, key = _in_doubt(ledger, "mail-1", calls)
    ledger.resolve(key, happened=False, by="ann", note="no such mail in the outbox")
    with c4a.run("mail-1"):
        assert send_email("bob@example.com") == "sent to bob@example.com"
    record = ledger.effect(key)
    assert (record.state, record.resolved_by) == ("succeeded", None)  # the row moved on
    [entry] = ledger.audit()
    assert (entry.actor, entry.action, entry.key, entry.attempt) == (
        "ann",
        "did_not_happen",
        key,
        1,
    )
    assert (entry.run_id, entry.tool) == ("mail-1", "send_email")
    assert entry.reason == "no such mail in the outbox"
    assert entry.at > 0


def test_every_decision_is_kept_in_order(ledger: c4a.Ledger) -> None:
    first = open_ticket("refund-1")
    ledger.approve(first.ticket, by="ann", reason="customer called")
    ledger.approve(first.ticket, by="ann")  # a double click records nothing more
    ledger.deny(first.ticket, by="bob", reason="fraud team says no")  # a later no wins
    with pytest.raises(c4a.LedgerError):
        ledger.approve(first.ticket, by="cy")  # a no is final: refused, and not recorded
    calls: list[str] = []
    _, key = _in_doubt(ledger, "mail-2", calls)
    ledger.resolve(key, happened=True, result={"id": "msg-1"}, by="dee", note="in the outbox")
    with pytest.raises(c4a.LedgerError):
        ledger.resolve(key, happened=False, by="eve")  # settled already: nothing recorded
    found = ledger.audit()
    assert [(e.actor, e.action) for e in found] == [
        ("dee", "happened"),
        ("bob", "denied"),
        ("ann", "approved"),
    ]
    assert [e.ticket for e in found[1:]] == [first.ticket, first.ticket]
    assert found[1].reason == "fraud team says no"
    assert found[0].reason == "in the outbox"
    assert [e.id for e in found] == sorted((e.id for e in found), reverse=True)


def test_a_reconcilers_settlement_is_in_the_audit_as_check(ledger: c4a.Ledger) -> None:
    state = {"runs": 0}

    @c4a.effect(name="charge", check=lambda amount: c4a.Happened({"charged": amount}))
    def charge(amount: int) -> dict[str, int]:
        state["runs"] += 1
        raise TimeoutError("no answer")

    with c4a.run("pay-1"), pytest.raises(TimeoutError):
        charge(5)
    with c4a.run("pay-1"):
        assert charge(5) == {"charged": 5}  # the reconciler answered; the tool did not run again
    assert state["runs"] == 1
    [entry] = ledger.audit()
    assert (entry.actor, entry.action, entry.tool) == ("check", "happened", "charge")


def test_gc_and_delete_run_leave_the_audit(ledger: c4a.Ledger) -> None:
    calls: list[str] = []
    send_email, key = _in_doubt(ledger, "mail-3", calls)
    ledger.resolve(key, happened=False, by="ann", note="not sent")
    with c4a.run("mail-3"):
        send_email("bob@example.com")
    ticket = open_ticket("refund-3")
    ledger.deny(ticket.ticket, by="bob")
    ledger.gc(0)
    ledger.delete_run("mail-3")
    assert ledger.effects("mail-3") == []
    assert [(e.actor, e.run_id) for e in ledger.audit()] == [("bob", "refund-3"), ("ann", "mail-3")]


def test_filters_and_keyset_pages(ledger: c4a.Ledger) -> None:
    for i in range(7):
        request = open_ticket(f"refund-{i}", amount=i)
        decide = ledger.approve if i % 2 == 0 else ledger.deny
        decide(request.ticket, by="ann" if i < 4 else "bob")
    everything = ledger.audit()
    assert len(everything) == 7
    pages, before = [], None
    while True:
        page = ledger.audit(limit=3, before=before)
        if not page:
            break
        pages.append(page)
        before = page[-1].id
    assert [len(p) for p in pages] == [3, 3, 1]
    assert [e.id for p in pages for e in p] == [e.id for e in everything]
    assert {e.run_id for e in ledger.audit(by="bob")} == {"refund-4", "refund-5", "refund-6"}
    assert {e.run_id for e in ledger.audit(action="denied")} == {"refund-1", "refund-3", "refund-5"}
    assert [e.action for e in ledger.audit(run_id="refund-2")] == ["approved"]
    assert len(ledger.audit(tool="pay", by="ann", action="approved")) == 2
    assert ledger.audit(since=everything[0].at + 3600) == []
    with pytest.raises(c4a.ConfigurationError, match="unknown audit action"):
        ledger.audit(action="approve")


def test_the_audit_command(
    ledger: c4a.Ledger, target: Target, capsys: pytest.CaptureFixture[str]
) -> None:
    url = ["--url", ledger.url] + (["--schema", target.schema] if target.schema else [])
    assert cli.main(["audit", *url]) == cli.EXIT_OK
    assert "No decisions or settlements recorded." in capsys.readouterr().out
    request = open_ticket("refund-9")
    ledger.deny(request.ticket, by="bob", reason="over the limit, again")
    assert cli.main(["audit", *url]) == cli.EXIT_OK
    out = capsys.readouterr().out
    assert "bob" in out
    assert "denied" in out
    assert "reason: over the limit, again" in out
    assert cli.main(["audit", *url, "--json", "--by", "bob"]) == cli.EXIT_OK
    [entry] = json.loads(capsys.readouterr().out)
    assert entry["ticket"] == request.ticket
    assert entry["at"].endswith("+00:00")  # ISO 8601, as every --json time
    assert entry["args"]["card"] == "***"  # what was decided on, masked as the card showed it
    assert cli.main(["audit", *url, "--csv"]) == cli.EXIT_OK
    [row] = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert (row["actor"], row["action"], row["reason"]) == (
        "bob",
        "denied",
        "over the limit, again",
    )
    assert json.loads(row["args"])["card"] == "***"
    assert cli.main(["audit", *url, "--by", "nobody"]) == cli.EXIT_OK
    assert "that match" in capsys.readouterr().out
    assert cli.main(["audit", *url, "--action", "approve"]) == cli.EXIT_ERROR
    assert "invalid choice" in capsys.readouterr().err


def test_the_audit_page_filters_pages_and_exports(ledger: c4a.Ledger) -> None:
    from call4agents.console import _audit

    for i in range(_audit.PAGE + 2):
        ledger.approve(open_ticket(f"refund-{i}", amount=i).ticket, by="ann", reason=f"ok {i}")
    app = create_app(ledger, ConsoleSettings(operator="ann", token="tok"))
    with TestClient(app, base_url="http://127.0.0.1") as c:
        first = c.get("/audit?token=tok")
        assert first.status_code == 200
        assert "ok 51" in first.text
        assert "ok 1<" not in first.text  # the oldest are on the next page
        older = first.text.split('rel="next"')[0].rsplit('href="', 1)[1].split('"')[0]
        second = c.get(older.replace("&amp;", "&"))
        assert "ok 1<" in second.text
        assert "ok 0<" in second.text
        assert 'rel="next"' not in second.text
        only = c.get("/audit", params={"run": "refund-7"}).text
        assert "ok 7" in only
        assert "ok 8" not in only
        exported = c.get("/audit", params={"format": "csv", "by": "ann"})
        assert exported.headers["content-type"].startswith("text/csv")
        assert "attachment" in exported.headers["content-disposition"]
        assert len(list(csv.DictReader(io.StringIO(exported.text)))) == _audit.PAGE + 2
        as_json = c.get("/audit", params={"format": "json", "action": "approved"}).json()
        assert len(as_json) == _audit.PAGE + 2
        assert c.get("/audit", params={"action": "nope"}).status_code == 400
        assert c.get("/audit", params={"before": "x"}).status_code == 400
        assert c.get("/audit", params={"format": "xml"}).status_code == 400


def _entries_at(ledger: c4a.Ledger, times: list[float]) -> None:
    """Audit rows at the given times, in that order of id: two transactions' decisions can land
    with ids out of their times' order, and several in one instant."""
    from call4agents.storage.tables import audit

    rows = [
        {
            "at": at,
            "actor": ("ann", "bob")[i % 2],
            "action": ("approved", "denied", "happened")[i % 3],
            "run_id": f"run-{i % 4}",
            "tool": ("pay", "mail")[i % 2],
            "key": f"{i:064d}",
            "ticket": f"apr_{i}",
        }
        for i, at in enumerate(times)
    ]
    with ledger.store.tx() as conn:
        conn.execute(audit.insert(), rows)


def test_pages_go_by_time_and_lose_or_repeat_nothing(ledger: c4a.Ledger) -> None:
    now = 1_900_000_000.0
    times = [now - (i * 37 % 50) for i in range(60)]  # shuffled; ten instants hold two
    _entries_at(ledger, times)
    filters: list[dict[str, Any]] = [
        {},
        {"by": "ann"},
        {"action": "denied"},
        {"run_id": "run-1"},
        {"tool": "mail"},
        {"since": now - 20},
        {"by": "bob", "tool": "mail", "since": now - 30},
    ]
    for chosen in filters:
        whole = ledger.audit(limit=1000, **chosen)
        assert [(e.at, e.id) for e in whole] == sorted(((e.at, e.id) for e in whole), reverse=True)
        paged, before = [], None
        while page := ledger.audit(limit=7, before=before, **chosen):
            paged.extend(page)
            before = page[-1].id
        assert [e.id for e in paged] == [e.id for e in whole], chosen
    assert len(ledger.audit(limit=1000)) == 60
    recent = ledger.audit(since=now - 20, limit=1000)
    assert {e.id for e in recent} == {e.id for e in ledger.audit(limit=1000) if e.at >= now - 20}


def test_a_page_after_an_entry_that_never_was_is_refused(
    ledger: c4a.Ledger, target: Target, capsys: pytest.CaptureFixture[str]
) -> None:
    _entries_at(ledger, [1_900_000_000.0])
    with pytest.raises(c4a.ConfigurationError, match="no audit entry has id 999"):
        ledger.audit(before=999)
    url = ["--url", ledger.url] + (["--schema", target.schema] if target.schema else [])
    assert cli.main(["audit", *url, "--before", "999"]) == cli.EXIT_ERROR
    assert "no audit entry has id 999" in capsys.readouterr().err
    app = create_app(ledger, ConsoleSettings(operator="ann", token="tok"))
    with TestClient(app, base_url="http://127.0.0.1") as c:
        c.get("/audit?token=tok")
        refused = c.get("/audit", params={"before": "999"})
        assert refused.status_code == 400
        assert "no audit entry has id 999" in refused.text


def test_the_audit_page_filters_by_when(ledger: c4a.Ledger) -> None:
    import time

    _entries_at(ledger, [time.time() - 2 * 3600, time.time() - 60])  # ann two hours ago, bob now
    app = create_app(ledger, ConsoleSettings(operator="ann", token="tok"))
    with TestClient(app, base_url="http://127.0.0.1") as c:
        c.get("/audit?token=tok")
        assert [e["actor"] for e in c.get("/audit?since=1h&format=json").json()] == ["bob"]
        assert [e["actor"] for e in c.get("/audit?since=24h&format=json").json()] == ["bob", "ann"]
        page = c.get("/audit?since=1h").text
        assert '<option value="1h" selected>last 1h</option>' in page
        assert c.get("/audit?since=2w").status_code == 400
