"""The inbox at volume: keyset pages, filters, search, order, and deciding ticked tickets.

Each decision on ticked tickets is still one decision per ticket, bound to the arguments its own
card showed; the tests tick, change and race them on both backends.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterator

import pytest
from sqlalchemy import update
from starlette.testclient import TestClient

import call4agents as c4a
from call4agents.storage.tables import approvals, effects
from tests.console.helpers import field, open_ticket, signed_in

TOKEN = "t0ken-for-volume"


@pytest.fixture
def ann(ledger: c4a.Ledger) -> Iterator[TestClient]:
    with signed_in(ledger, TOKEN) as c:
        yield c


def shown(page: str) -> list[str]:
    """The tickets a page lists, as lines (the inbox's own view) or as full cards."""
    return re.findall(r'<(?:section class="ticket"|li class="row") id="(apr_\w+)"', page)


def next_link(page: str, where: str = "/") -> str | None:
    found = re.search(rf'<a href="({re.escape(where)}\?[^"]*)" rel="next">', page)
    return found.group(1).replace("&amp;", "&") if found else None


def test_keyset_pages_walk_every_waiting_ticket_once(ann: TestClient) -> None:
    opened = [open_ticket(f"vol-{i:02d}", amount=i).ticket for i in range(60)]
    page = ann.get("/").text
    assert "60 waiting." in page
    seen: list[str] = []
    address: str | None = "/"
    while address is not None:
        page = ann.get(address).text
        seen += shown(page)
        address = next_link(page)
        if seen != opened[: len(seen)]:
            break
    assert seen == opened  # oldest first, each once, none skipped
    assert "First page" in page
    newest = shown(ann.get("/?sort=newest").text)
    assert newest == opened[::-1][:25]
    second = shown(ann.get(next_link(ann.get("/?sort=newest").text) or "").text)
    assert second == opened[::-1][25:50]


def test_filters_and_search_select_tickets(ann: TestClient, ledger: c4a.Ledger) -> None:
    cheap = open_ticket("shop-1", amount=5)
    dear = open_ticket("bank-2", amount=9000)

    @c4a.effect(name="send_email", kind="write", approval=True)
    def send_email(to: str) -> str:
        return f"sent to {to}"

    with c4a.run("mail-3"), pytest.raises(c4a.ApprovalRequired) as asked:
        send_email("zed@example.com")
    mail = asked.value.request
    assert shown(ann.get("/?tool=pay").text) == [cheap.ticket, dear.ticket]
    assert shown(ann.get("/?run=bank").text) == [dear.ticket]
    assert shown(ann.get("/?kind=write").text) == [mail.ticket]
    assert shown(ann.get("/?kind=irreversible").text) == [cheap.ticket, dear.ticket]
    assert shown(ann.get("/?q=zed%40example").text) == [mail.ticket]  # in the arguments
    assert shown(ann.get("/?q=9000").text) == [dear.ticket]
    assert shown(ann.get("/?q=4242").text) == []  # a redacted card is never matched
    assert shown(ann.get("/?asked=approval%3DTrue").text) == [
        cheap.ticket,
        dear.ticket,
        mail.ticket,
    ]
    page = ann.get("/?tool=pay&run=shop")
    assert "1 waiting match." in page.text
    assert 'value="shop"' in page.text  # the form keeps what was asked
    assert 'data-live="1"' not in page.text  # a filtered page is not replaced by news
    # By how long they have waited (the database clock): only the one asked an hour ago.
    with ledger.store.tx() as conn:
        conn.execute(
            update(approvals)
            .where(approvals.c.ticket == dear.ticket)
            .values(requested_at=approvals.c.requested_at - 3700)
        )
    assert shown(ann.get("/?waited=1h").text) == [dear.ticket]
    assert shown(ann.get("/?sort=oldest").text)[0] == dear.ticket


@pytest.mark.parametrize(
    ("query", "said"),
    [
        ("sort=sideways", "unknown sort 'sideways'"),
        ("kind=dangerous", "unknown kind 'dangerous'"),
        ("waited=3d", "unknown wait '3d'"),
    ],
)
def test_bad_filters_say_what_to_pick(ann: TestClient, query: str, said: str) -> None:
    answer = ann.get(f"/?{query}")
    assert answer.status_code == 400
    assert said in html.unescape(answer.text)
    assert "pick one of" in answer.text
    assert "Traceback" not in answer.text


def bulk(c: TestClient, decision: str, picks: dict[str, str], reason: str = "") -> str:
    page = c.get("/").text
    csrf = field(page, "csrf") if 'name="csrf"' in page else "none-on-a-read-only-page"
    form = {"csrf": csrf, "decision": decision, "reason": reason}
    form |= {f"pick.{t}": fp for t, fp in picks.items()}
    answer = c.post("/approvals/bulk", data=form)
    return f"{answer.status_code} {answer.text}"


def picks_on(page: str) -> dict[str, str]:
    return dict(re.findall(r'name="pick\.(apr_\w+)" value="(\w+)"', page))


def test_ticked_tickets_are_each_decided_on_what_their_card_showed(
    ann: TestClient, ledger: c4a.Ledger
) -> None:
    a, b, c = (open_ticket(f"bulk-{i}", amount=10 + i) for i in range(3))
    picks = picks_on(ann.get("/").text)
    assert set(picks) == {a.ticket, b.ticket, c.ticket}
    said = bulk(ann, "approve", {a.ticket: picks[a.ticket], b.ticket: picks[b.ticket]}, "ok")
    assert said.startswith("200 ")
    assert said.count("Approved <code>pay</code>") == 2
    for t in (a, b):
        found = ledger.approval(t.ticket)
        assert found is not None
        assert (found.state, found.decided_by, found.reason) == ("approved", "ann", "ok")
    assert ledger.approval(c.ticket).state == "pending"  # type: ignore[union-attr]
    # A tick that does not match its card's arguments, beside one already decided and one fine:
    # only the fine one is decided, and the page says why the others were not.
    d = open_ticket("bulk-9", amount=99)
    fresh = picks_on(ann.get("/").text)
    said = bulk(
        ann, "deny", {c.ticket: "0" * 64, a.ticket: picks[a.ticket], d.ticket: fresh[d.ticket]}
    )
    assert "are not the ones your page showed" in said
    assert "was already approved by ann (ok): your decision was not recorded" in said
    assert said.count("Denied <code>pay</code>") == 1
    assert ledger.approval(c.ticket).state == "pending"  # type: ignore[union-attr]
    assert ledger.approval(a.ticket).state == "approved"  # type: ignore[union-attr]
    assert ledger.approval(d.ticket).state == "denied"  # type: ignore[union-attr]


def test_bulk_refusals(ann: TestClient, ledger: c4a.Ledger) -> None:
    t = open_ticket("bulk-x")
    assert bulk(ann, "approve", {}).startswith("400 ")
    assert "tick at least one ticket" in bulk(ann, "approve", {})
    assert "say approve or deny" in bulk(ann, "maybe", {t.ticket: "x"})
    many = {f"apr_{i:020x}": "x" for i in range(101)}
    assert "tick at most 100 tickets" in bulk(ann, "approve", many)
    assert ledger.approval(t.ticket).state == "pending"  # type: ignore[union-attr]
    with signed_in(ledger, TOKEN, read_only="bob", operator="bob") as bob:
        page = bob.get("/").text
        assert 'id="bulk"' not in page
        assert bulk(bob, "approve", picks_on(ann.get("/").text)).startswith("403 ")
    assert ledger.approval(t.ticket).state == "pending"  # type: ignore[union-attr]


def test_waiting_page_in_code_checks_what_it_is_given(ledger: c4a.Ledger) -> None:
    first, second = open_ticket("code-1"), open_ticket("code-2")
    page, total = ledger.waiting_page(c4a.WaitingFilter(tool="pay"), limit=1)
    assert ([t.ticket for t in page], total) == ([first.ticket], 2)
    page, _ = ledger.waiting_page(c4a.WaitingFilter(tool="pay"), after=first.ticket, limit=1)
    assert [t.ticket for t in page] == [second.ticket]
    assert ledger.waiting_page(after="apr_not_a_ticket") == ([], 2)
    for bad, said in (
        (c4a.WaitingFilter(sort="up"), "unknown sort 'up'"),
        (c4a.WaitingFilter(kind="big"), "unknown kind 'big'"),
        (c4a.WaitingFilter(older_than=-1), "older_than is seconds waited"),
    ):
        with pytest.raises(c4a.ConfigurationError, match=said):
            ledger.waiting_page(bad)


def test_runs_page_by_keyset_through_every_run_once(ann: TestClient, ledger: c4a.Ledger) -> None:
    @c4a.effect(name="lookup", kind="write")
    def lookup(order: int) -> int:
        return order

    for i in range(230):
        with c4a.run(f"run-{i:03d}"):
            lookup(i)
    newest_first = [f"run-{i:03d}" for i in range(229, -1, -1)]
    seen: list[str] = []
    address: str | None = "/runs?active=all"
    pages = 0
    while address is not None and pages < 5:
        page = ann.get(address).text
        seen += re.findall(r'<a href="/run\?id=(run-\d+)&amp;back=[^"]*">', page)  # and back
        address = next_link(page, "/runs")
        pages += 1
    assert (pages, seen) == (3, newest_first)  # 100, 100, 30: each once, in order
    assert "First page" in page
    bad = ann.get("/runs?before_at=yesterday&before_run=x")
    assert bad.status_code == 400
    assert "is not a time" in bad.text


def test_runs_at_the_same_moment_are_paged_by_id(ledger: c4a.Ledger) -> None:
    @c4a.effect(name="lookup", kind="write")
    def lookup(order: int) -> int:
        return order

    for i in range(7):
        with c4a.run(f"tie-{i}"):
            lookup(i)
            lookup(i + 100)
    with ledger.store.tx() as conn:  # every action of every run at one moment
        conn.execute(update(effects).values(updated_at=1_700_000_000.25))
    seen: list[str] = []
    last = None
    for _ in range(5):
        found = ledger.runs(limit=3, before=last)
        if not found:
            break
        seen += [r.run_id for r in found]
        last = found[-1]
    assert seen == [f"tie-{i}" for i in range(6, -1, -1)]
