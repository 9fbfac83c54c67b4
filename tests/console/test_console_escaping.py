"""Markup crafted into anything a page shows stays text: a tool's name, a run id, arguments, a
result, an error, a reason, a note, an escalation, a person's name and the filters in the
address. Every page is parsed as a browser would parse it: its only script is the console's own
file, no element carries an event handler, and each payload reads back as the text it was.

Requests go through Starlette's test client to the real app on a real ledger (both backends).
"""

from __future__ import annotations

import html
from html.parser import HTMLParser
from typing import Any
from urllib.parse import quote

import pytest
from starlette.testclient import TestClient

import call4agents as c4a
from call4agents.console import ConsoleSettings, create_app
from tests.console.helpers import signed_in

TOKEN = "t0ken-for-escaping"
SCRIPT = "<script>alert(1)</script>"
IMAGE = '"><img src=x onerror=alert(2)>'
ATTRIBUTE = "' onmouseover='alert(3)"
PAYLOAD = SCRIPT + IMAGE + ATTRIBUTE  # closes a tag, an attribute in either quote, and opens one
RUN = "run" + PAYLOAD


class Elements(HTMLParser):
    """Every start tag of a page with its attributes, and its text."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, list[tuple[str, str | None]]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, attrs))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def parsed(page: str) -> Elements:
    found = Elements()
    found.feed(page)
    return found


def seed(ledger: c4a.Ledger) -> dict[str, str]:
    @c4a.effect(name="pay" + PAYLOAD, kind="irreversible", approval=True)
    def pay(note: str) -> str:
        return PAYLOAD

    @c4a.effect(name="mail" + PAYLOAD, kind="write", undo=lambda result, **_: None)
    def mail(note: str) -> dict[str, str]:
        return {"id": PAYLOAD}

    @c4a.effect(name="wire" + PAYLOAD, kind="irreversible", escalate_on=("in_doubt",))
    def wire(note: str) -> str:
        raise TimeoutError(PAYLOAD)

    with c4a.run(RUN), pytest.raises(c4a.ApprovalRequired) as asked:
        pay(PAYLOAD)
    ticket = asked.value.request.ticket
    ledger.deny(ticket, by="ann", reason=PAYLOAD)
    with c4a.run(RUN), pytest.raises(c4a.ApprovalRequired) as again:
        pay(PAYLOAD + "again")
    with c4a.run(RUN):
        mail(PAYLOAD)
    with c4a.run(RUN), pytest.raises(c4a.Escalated):
        wire(PAYLOAD)
    return {"denied": ticket, "waiting": again.value.request.ticket}


def test_nothing_crafted_into_a_page_becomes_markup(ledger: c4a.Ledger) -> None:
    ids = seed(ledger)
    run = quote(RUN, safe="")
    crafted = quote(PAYLOAD, safe="")
    pages = [
        "/",
        "/?view=cards",
        f"/?q={crafted}&tool={crafted}",
        f"/approvals/{ids['waiting']}",
        f"/approvals/{ids['denied']}",
        "/doubt",
        f"/doubt?tool={crafted}&why={crafted}",
        "/runs?active=all",
        f"/runs?tool={crafted}&q={crafted}",
        f"/run?id={run}",
        f"/run?id={run}&back={quote('/runs?q=' + crafted, safe='')}",
        f"/run/undo?id={run}",
        "/audit",
        f"/audit?by={crafted}&run={crafted}&tool={crafted}",
        "/health",
        f"/approvals/{crafted}",  # a 404 that names what was asked for
        f"/run?id={crafted}",
    ]
    header = {"X-User": ("bob" + PAYLOAD).encode(), "X-Proxy-Secret": b"s"}
    with signed_in(ledger, TOKEN) as ann:
        checked = [(path, ann.get(path)) for path in pages]
    settings = ConsoleSettings(
        operator="ann", user_header="X-User", proxy_secret_header="X-Proxy-Secret", proxy_secret="s"
    )
    with TestClient(create_app(ledger, settings), base_url="http://127.0.0.1") as proxied:
        for path in ("/", "/audit"):
            checked.append((f"{path} as a crafted name", proxied.get(path, headers=header)))
    for path, answer in checked:
        assert answer.status_code in (200, 404), (path, answer.status_code)
        found = parsed(answer.text)
        scripts = [dict(attrs) for tag, attrs in found.tags if tag == "script"]
        assert scripts == [{"src": "/static/console.js", "defer": None}], path
        assert "img" not in [tag for tag, _ in found.tags], path
        handlers = [
            (tag, name) for tag, attrs in found.tags for name, _ in attrs if name.startswith("on")
        ]
        assert handlers == [], path
        # A payload shown reads back whole, as text or a value, never cut short into markup.
        values = [v or "" for _, attrs in found.tags for _, v in attrs]
        if PAYLOAD in html.unescape(answer.text):
            assert any(PAYLOAD in v for v in ["".join(found.text), *values]), path
    shown: dict[str, Any] = {path: answer.text for path, answer in checked}
    assert PAYLOAD in "".join(parsed(shown[f"/run?id={run}"]).text)
    assert "bob" + PAYLOAD in "".join(parsed(shown["/audit as a crafted name"]).text)
