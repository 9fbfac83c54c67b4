"""The console for an operator working through many: the in-doubt queue paged and filtered, a
run's page settling its own actions in doubt (an escalated run's too), the inbox's one line a
ticket, filters kept across a decision, old and new values, superseded tickets.

Requests go through Starlette's test client to the real app on a real ledger (both backends).
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from sqlalchemy import update
from starlette.testclient import TestClient

import call4agents as c4a
from call4agents.storage.tables import effects
from tests.console.helpers import field, make_in_doubt, open_ticket, signed_in

TOKEN = "t0ken-for-operators"


@pytest.fixture
def ann(ledger: c4a.Ledger) -> Iterator[TestClient]:
    with signed_in(ledger, TOKEN) as c:
        yield c


def doubts(page: str) -> list[str]:
    """The actions in doubt a page shows, by their run."""
    return re.findall(r'<section class="doubt".*?<a href="/run\?id=[^"]*">([^<]*)</a>', page)


def lines(page: str) -> list[str]:
    return re.findall(r'<li class="row" id="(apr_\w+)"', page)


def next_link(page: str, where: str) -> str | None:
    found = re.search(rf'<a href="({re.escape(where)}\?[^"]*)" rel="next">', page)
    return html.unescape(found.group(1)) if found else None


def settle(c: TestClient, page: str, key: str, outcome: str = "did_not_happen") -> Any:
    """Post the settle form of ``key`` as ``page`` shows it (its hidden fields included)."""
    form = page.split(f'action="/doubt/{key}"', 1)[1].split("</form>", 1)[0]
    fields = dict(re.findall(r'type="hidden" name="(\w+)" value="([^"]*)"', form))
    data = {k: html.unescape(v) for k, v in fields.items()}
    return c.post(f"/doubt/{key}", data={**data, "outcome": outcome}, follow_redirects=False)


def test_the_in_doubt_queue_pages_through_every_action_once(ann: TestClient) -> None:
    made = [make_in_doubt(f"doubt-{i:02d}").run_id for i in range(30)]
    page = ann.get("/doubt").text
    assert "30 in doubt." in page
    seen: list[str] = []
    address: str | None = "/doubt"
    while address is not None and len(seen) < 60:
        page = ann.get(address).text
        seen += doubts(page)
        address = next_link(page, "/doubt")
    assert seen == made  # those in doubt longest first, each once, none skipped
    assert "First page" in page
    assert 'data-live="1"' not in page  # a page deep in the queue is not replaced by news


def test_the_in_doubt_queue_filters_by_tool_run_reason_and_age(
    ann: TestClient, ledger: c4a.Ledger
) -> None:
    mail = [make_in_doubt(f"mail-{i}") for i in range(3)]

    @c4a.effect(name="wire", kind="irreversible")
    def wire(amount: int) -> str:
        raise TimeoutError("the bank hung up")

    with c4a.run("bank-1"), pytest.raises(TimeoutError):
        wire(5)
    assert doubts(ann.get("/doubt?tool=wire").text) == ["bank-1"]
    page = ann.get("/doubt?tool=send_email&run=mail-1").text
    assert doubts(page) == ["mail-1"]
    assert "1 in doubt match." in page
    assert 'value="mail-1"' in page  # the form keeps what was asked
    assert "<details" in page  # and is folded away, saying what is in use
    assert "Filters (tool: send_email, run: mail-1)" in page
    assert doubts(ann.get("/doubt?why=hung+up").text) == ["bank-1"]
    assert doubts(ann.get("/doubt?why=nothing+like+it").text) == []
    assert "Nothing in doubt matches." in ann.get("/doubt?why=nothing+like+it").text
    # By how long they have been in doubt (the database clock): only the one an hour back.
    with ledger.store.tx() as conn:
        conn.execute(
            update(effects)
            .where(effects.c.key == mail[1].key)
            .values(updated_at=effects.c.updated_at - 3700)
        )
    assert doubts(ann.get("/doubt?age=1h").text) == ["mail-1"]
    assert doubts(ann.get("/doubt").text)[0] == "mail-1"  # now the longest in doubt
    bad = ann.get("/doubt?age=3d")
    assert bad.status_code == 400
    assert "unknown age '3d'" in html.unescape(bad.text)
    assert "Traceback" not in bad.text


def test_settling_from_a_filtered_queue_comes_back_to_it(
    ann: TestClient, ledger: c4a.Ledger
) -> None:
    first, second = make_in_doubt("mail-1"), make_in_doubt("mail-2")
    page = ann.get("/doubt?tool=send_email").text
    done = settle(ann, page, first.key)
    assert done.status_code == 303
    target = done.headers["location"]
    assert parse_qs(urlsplit(target).query) == {"tool": ["send_email"], "settled": [first.key]}
    back = ann.get(target).text
    assert "Settled send_email in run mail-1: it did not happen." in back
    assert doubts(back) == ["mail-2"]
    # A form is the client's to change: a "back" to another site goes to the queue instead.
    csrf = field(back, "csrf")
    away = ann.post(
        f"/doubt/{second.key}",
        data={"csrf": csrf, "outcome": "did_not_happen", "back": "//evil.example/x"},
        follow_redirects=False,
    )
    assert away.headers["location"] == f"/doubt?settled={second.key}"
    assert ledger.find(second.key).state == "failed"  # type: ignore[union-attr]


def test_a_run_page_settles_its_own_actions_in_doubt(ann: TestClient, ledger: c4a.Ledger) -> None:
    record = make_in_doubt("mail-9")
    page = ann.get("/run?id=mail-9").text
    assert "In doubt: 1 to settle" in page
    assert record.idempotency_key in page
    done = settle(ann, page, record.key, "happened")
    assert done.headers["location"] == f"/run?id=mail-9&settled={record.key}"
    back = ann.get(done.headers["location"]).text
    assert "Settled send_email in run mail-9: it happened." in back
    assert "In doubt:" not in back
    settled = ledger.find(record.key)
    assert settled is not None
    assert (settled.state, settled.resolved_by) == ("succeeded", "ann")


def test_an_escalated_runs_action_in_doubt_is_settled_on_its_page(
    ann: TestClient, ledger: c4a.Ledger
) -> None:
    @c4a.effect(name="wire", kind="irreversible", escalate_on=("in_doubt",))
    def wire(amount: int) -> str:
        raise TimeoutError("the bank did not answer")

    with c4a.run("esc-9"), pytest.raises(c4a.Escalated):
        wire(500)
    [record] = [r for r in ledger.in_doubt() if r.run_id == "esc-9"]
    page = ann.get("/run?id=esc-9").text
    assert "Escalation hand-off" in page
    assert "In doubt: 1 to settle" in page
    assert settle(ann, page, record.key).status_code == 303
    assert ledger.find(record.key).state == "failed"  # type: ignore[union-attr]
    handoff = ledger.handoff("esc-9")
    assert handoff is not None
    assert handoff.in_doubt == []


def test_a_read_only_user_sees_a_runs_doubt_but_cannot_settle_it(ledger: c4a.Ledger) -> None:
    record = make_in_doubt("mail-5")
    with signed_in(ledger, TOKEN) as operator:
        csrf = field(operator.get("/doubt").text, "csrf")
    with signed_in(ledger, TOKEN, read_only="vic", operator="vic") as vic:
        page = vic.get("/run?id=mail-5").text
        assert "In doubt: 1 to settle" in page
        assert "Read-only: you cannot settle it." in page
        assert f'action="/doubt/{record.key}"' not in page
        answer = vic.post(f"/doubt/{record.key}", data={"csrf": csrf, "outcome": "happened"})
        assert answer.status_code == 403
    assert ledger.find(record.key).state == "in_doubt"  # type: ignore[union-attr]


def test_the_inbox_lists_one_line_a_ticket_that_opens_its_card(ann: TestClient) -> None:
    cheap = open_ticket("shop-1", amount=5)
    dear = open_ticket("bank-2", amount=9000)
    page = ann.get("/?tool=pay").text
    assert lines(page) == [cheap.ticket, dear.ticket]
    line = page.split(f'id="{dear.ticket}"', 1)[1].split("</li>", 1)[0]
    assert "<code>pay</code> in run bank-2" in line
    assert "amount=9000" in line
    assert "card=&#34;***&#34;" in line  # the redacted card, masked as on the card
    assert "4242" not in page
    assert "waiting " in line
    assert f'href="/approvals/{dear.ticket}?tool=pay"' in line  # the card keeps the filter
    assert f'name="pick.{dear.ticket}"' in line  # ticked from its line
    assert "<details" in page
    assert "section" not in page.split("<main", 1)[1].split("<ul", 1)[0]
    cards = ann.get("/?tool=pay&view=cards").text
    assert f'<section class="ticket" id="{dear.ticket}"' in cards
    assert 'href="/?tool=pay&amp;view=list"' in cards  # and back to the lines
    bad = ann.get("/?view=sideways")
    assert bad.status_code == 400
    assert "unknown view" in html.unescape(bad.text)


def test_a_decision_on_a_card_brings_up_the_next_ticket_of_the_same_filter(
    ann: TestClient, ledger: c4a.Ledger
) -> None:
    first, second = open_ticket("shop-1", amount=5), open_ticket("shop-2", amount=6)
    open_ticket("bank-3", amount=7)  # not in the filter
    card = ann.get(f"/approvals/{first.ticket}?run=shop").text
    assert 'href="/?run=shop"' in card  # back to the inbox, as filtered
    form = {
        "csrf": field(card, "csrf"),
        "fingerprint": field(card, "fingerprint"),
        "back": html.unescape(field(card, "back")),
        "then": field(card, "then"),
        "decision": "approve",
    }
    done = ann.post(f"/approvals/{first.ticket}", data=form, follow_redirects=False)
    target = done.headers["location"]
    assert target == f"/approvals/{second.ticket}?run=shop&decided={first.ticket}"
    upcoming = ann.get(target).text
    assert f"Approved pay in run shop-1 (ticket {first.ticket})" in upcoming
    form |= {"csrf": field(upcoming, "csrf"), "fingerprint": field(upcoming, "fingerprint")}
    form["decision"] = "deny"
    done = ann.post(f"/approvals/{second.ticket}", data=form, follow_redirects=False)
    # The last of the filter: back to the filtered inbox, which says so.
    assert done.headers["location"] == f"/?run=shop&decided={second.ticket}"
    back = ann.get(done.headers["location"]).text
    assert f"Denied pay in run shop-2 (ticket {second.ticket})" in back
    assert "No approvals waiting match." in back
    assert ledger.approval(second.ticket).state == "denied"  # type: ignore[union-attr]


def test_a_decision_in_the_card_view_returns_to_the_same_filter(ann: TestClient) -> None:
    first = open_ticket("shop-1", amount=5)
    later = open_ticket("shop-2", amount=6)
    page = ann.get("/?run=shop&view=cards").text
    card = page.split(f'id="{first.ticket}"', 1)[1].split("</section>", 1)[0]
    form = dict(re.findall(r'type="hidden" name="(\w+)" value="([^"]*)"', card))
    data = {k: html.unescape(v) for k, v in form.items()} | {"decision": "approve"}
    done = ann.post(f"/approvals/{first.ticket}", data=data, follow_redirects=False)
    assert done.headers["location"] == f"/?run=shop&view=cards&decided={first.ticket}"
    assert lines(ann.get("/?run=shop").text) == [later.ticket]


def test_what_changed_shows_old_and_new_values_unless_redacted(
    ann: TestClient, ledger: c4a.Ledger
) -> None:
    first = open_ticket("refund-1", amount=40)
    ledger.deny(first.ticket, by="bob")
    again = open_ticket("refund-1", amount=45, card="9999-9999-9999-9999")
    page = ann.get(f"/approvals/{again.ticket}").text
    table = page.split('<table class="changes">', 1)[1].split("</table>", 1)[0]
    rows = {r.split("<code>", 1)[1].split("<", 1)[0]: r for r in table.split("<tr>")[2:]}
    assert "was <code>40</code>, now <code>45</code>" in rows["amount"]
    assert "same</span> <code>&#34;alice&#34;</code>" in rows["to"]
    assert "differs (redacted: the value is not shown)" in rows["card"]
    for secret in ("9999", "4242", *(again.redacted_marks or {}).values()):
        assert secret not in page


def test_a_superseded_ticket_is_marked(ann: TestClient, ledger: c4a.Ledger) -> None:
    older = open_ticket("refund-1", amount=40)
    newer = open_ticket("refund-1", amount=45)  # the agent asked again, other arguments
    other = open_ticket("refund-2", amount=40)
    page = ann.get("/").text

    def line(ticket: str) -> str:
        return page.split(f'id="{ticket}"', 1)[1].split("</li>", 1)[0]

    assert "superseded" in line(older.ticket)
    assert "superseded" not in line(newer.ticket)
    assert "superseded" not in line(other.ticket)
    card = ann.get(f"/approvals/{older.ticket}").text
    assert '<span class="superseded">superseded</span>' in card
    assert "This run has asked about pay again since this ticket" in card
    assert "superseded" not in ann.get(f"/approvals/{newer.ticket}").text


def test_the_live_poll_names_the_queues_first_page_in_its_order(
    ann: TestClient, ledger: c4a.Ledger
) -> None:
    first, second = make_in_doubt("mail-1"), make_in_doubt("mail-2")
    with ledger.store.tx() as conn:  # the later action has been in doubt longer
        conn.execute(
            update(effects)
            .where(effects.c.key == second.key)
            .values(updated_at=effects.c.updated_at - 600)
        )
    page = ann.get("/doubt").text
    shown = re.search(r'id="live-list" data-ids="([^"]*)"', page)
    assert shown is not None
    assert shown.group(1) == f"{second.key},{first.key}"
    # Equal, so a poll that finds nothing new does not fetch the page again.
    assert ann.get("/api/live").json()["in_doubt_keys"] == [second.key, first.key]


def test_a_line_is_ticked_only_when_it_shows_every_argument_whole(ann: TestClient) -> None:
    @c4a.effect(name="send_note", kind="write", approval=True)
    def send_note(to: str, body: str) -> str:
        return "sent"

    with c4a.run("note-1"), pytest.raises(c4a.ApprovalRequired) as asked:
        send_note("bob@example.com", "a long message " * 10)
    long = asked.value.request
    short = open_ticket("shop-1", amount=5)
    page = ann.get("/").text

    def line(ticket: str) -> str:
        return page.split(f'id="{ticket}"', 1)[1].split("</li>", 1)[0]

    assert f'name="pick.{short.ticket}"' in line(short.ticket)
    assert "pick." not in line(long.ticket)  # its body is cut short on the line
    assert "body=&#34;a long message" in line(long.ticket)
    assert "arguments cut short: open the card to decide" in line(long.ticket)
    cards = ann.get("/?view=cards").text
    assert f'name="pick.{long.ticket}"' in cards  # its card shows it whole, and has a tick


def _link(page: str, text: str) -> str:
    """The address of the link whose text is ``text``."""
    found = re.search(rf'<a href="([^"]*)">{re.escape(text)}</a>', page)
    assert found, f"no link {text!r} on the page"
    return html.unescape(found.group(1))


def test_a_run_opened_from_a_filtered_runs_list_leads_back_to_it_across_a_settling(
    ann: TestClient, ledger: c4a.Ledger
) -> None:
    record = make_in_doubt("mail-1")
    make_in_doubt("mail-2")
    listed = ann.get("/runs?state=in_doubt&q=mail").text
    opened = _link(listed, "mail-1")
    assert parse_qs(urlsplit(opened).query) == {
        "id": ["mail-1"],
        "back": ["/runs?state=in_doubt&q=mail"],
    }
    page = ann.get(opened).text
    assert _link(page, "Back to the runs, as filtered") == "/runs?state=in_doubt&q=mail"
    done = settle(ann, page, record.key)
    target = done.headers["location"]
    assert parse_qs(urlsplit(target).query) == {
        "id": ["mail-1"],
        "back": ["/runs?state=in_doubt&q=mail"],
        "settled": [record.key],
    }
    after = ann.get(target).text
    assert "Settled send_email in run mail-1: it did not happen." in after
    assert _link(after, "Back to the runs, as filtered") == "/runs?state=in_doubt&q=mail"
    assert "mail-1" not in ann.get("/runs?state=in_doubt&q=mail").text  # settled, so gone
    # The queue and the audit lead back the same way; an address of no list leads nowhere.
    queue = ann.get("/doubt?tool=send_email").text
    assert _link(ann.get(_link(queue, "mail-2")).text, "Back to the in-doubt queue, as filtered")
    audit = ann.get("/audit?action=did_not_happen").text
    assert _link(ann.get(_link(audit, "mail-1")).text, "Back to the audit, as filtered")
    for elsewhere in ("//evil.example/runs", "/approvals/x", "https://evil.example/"):
        page = ann.get("/run", params={"id": "mail-1", "back": elsewhere}).text
        assert "Back to" not in page
        assert "evil" not in page


def test_runs_and_audit_keep_their_filters_from_page_to_page(
    ann: TestClient, ledger: c4a.Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    from call4agents.console import _audit, _runs

    monkeypatch.setattr(_runs, "LISTED", 2)
    monkeypatch.setattr(_audit, "PAGE", 2)

    @c4a.effect(name="lookup", kind="write")
    def lookup(order: int) -> int:
        return order

    @c4a.effect(name="other", kind="write")
    def other(order: int) -> int:
        return order

    for i in range(5):
        with c4a.run(f"look-{i}"):
            lookup(i)
        with c4a.run(f"else-{i}"):
            other(i)
    seen, address = [], "/runs?tool=lookup&active=all"
    while address:
        page = ann.get(address).text
        seen += re.findall(r'<a href="/run\?id=([\w-]+)&amp;back=[^"]*">', page)
        found = next_link(page, "/runs")
        assert found is None or parse_qs(urlsplit(found).query)["tool"] == ["lookup"]
        address = found or ""
    assert seen == [f"look-{i}" for i in range(4, -1, -1)]
    assert _link(page, "First page") == "/runs?tool=lookup&active=all"
    for i in range(5):
        who = "ann" if i % 2 else "bob"
        ledger.approve(open_ticket(f"pay-{i}", amount=i).ticket, by=who, reason=f"ok {i}")
    reasons, address = [], "/audit?by=ann"
    while address:
        page = ann.get(address).text
        reasons += re.findall(r"ok \d", page)
        found = next_link(page, "/audit")
        assert found is None or parse_qs(urlsplit(found).query)["by"] == ["ann"]
        address = found or ""
    assert reasons == ["ok 3", "ok 1"]
    assert _link(page, "First page") == "/audit?by=ann"


def test_ticked_tickets_decided_go_on_to_the_next_of_the_same_filter(
    ann: TestClient, ledger: c4a.Ledger
) -> None:
    shop = [open_ticket(f"shop-{i}", amount=i) for i in range(4)]
    open_ticket("bank-1", amount=99)  # not in the filter
    page = ann.get("/?run=shop&view=cards").text
    picks = dict(re.findall(r'name="pick\.(apr_\w+)" value="(\w+)"', page))
    assert set(picks) == {t.ticket for t in shop}
    form = {"csrf": field(page, "csrf"), "back": html.unescape(field(page, "back"))}
    form |= {"decision": "deny", "reason": "duplicates"}
    form |= {f"pick.{t.ticket}": picks[t.ticket] for t in shop[:2]}
    form[f"pick.{shop[2].ticket}"] = "0" * 64  # not what its card showed
    done = ann.post("/approvals/bulk", data=form, follow_redirects=False)
    assert done.status_code == 303
    target = done.headers["location"]
    assert parse_qs(urlsplit(target).query) == {
        "run": ["shop"],
        "view": ["cards"],
        "bulk": ["deny"],
        "done": [f"{shop[0].ticket},{shop[1].ticket}"],
        "refused": [shop[2].ticket],
    }
    landing = ann.get(target).text
    said = landing.split('<ul class="bulk-result">', 1)[1].split("</ul>", 1)[0]
    assert said.count('<li class="done">Denied <code>pay</code>') == 2
    assert f"ticket {shop[2].ticket}&#39;s arguments are not the ones your page showed" in said
    # The same filter and view, its next tickets up: the two left of the shop, not the bank's.
    shown = re.findall(r'<section class="ticket" id="(apr_\w+)"', landing)
    assert shown == [shop[2].ticket, shop[3].ticket]
    assert [ledger.approval(t.ticket).state for t in shop] == [  # type: ignore[union-attr]
        "denied",
        "denied",
        "pending",
        "pending",
    ]
    # An address that claims more than was decided says what each ticket is.
    claimed = ann.get("/", params={"bulk": "approve", "done": f"{shop[3].ticket},apr_nothing"}).text
    assert "Approved" not in claimed
    assert "there is no approval ticket &#39;apr_nothing&#39;" in claimed


def test_an_escalated_runs_hand_off_says_where_to_settle_in_the_console(
    ann: TestClient, ledger: c4a.Ledger
) -> None:
    @c4a.effect(name="wire", kind="irreversible", escalate_on=("in_doubt",))
    def wire(amount: int) -> str:
        raise TimeoutError("the bank did not answer")

    with c4a.run("esc-5"), pytest.raises(c4a.Escalated) as ended:
        wire(500)
    [record] = [r for r in ledger.in_doubt() if r.run_id == "esc-5"]
    key = record.key[:12]
    [step] = ended.value.handoff.what_remains
    assert "settle it in the console (In doubt, or this run's page)" in step
    assert f"`call4agents resolve {key} --happened` (or `--did-not-happen`)" in step
    page = ann.get("/run?id=esc-5").text
    here = page.split('<ul class="settle-here">', 1)[1].split("</ul>", 1)[0]
    assert f'<a href="#k{key}">Settle <code>wire</code> above</a>' in here
    assert f"<code>call4agents resolve {key} --happened</code>" in here
    assert f'<section class="doubt" id="k{key}"' in page  # what the link leads to
    settle(ann, page, record.key)
    assert 'class="settle-here"' not in ann.get("/run?id=esc-5").text  # nothing left to settle
