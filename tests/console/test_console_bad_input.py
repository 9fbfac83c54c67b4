"""A person's odd input gets a 400 page in the console's layout saying what was wrong: a token,
cookie, bearer or CSRF value beyond ASCII, a malformed form, a filter too long for any database.
Never a 500, a 503 or a traceback (the test client raises any error the app lets out).

Requests go through Starlette's test client to the real app on a real ledger (both backends).
"""

from __future__ import annotations

import html
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

import call4agents as c4a
from call4agents.console import ConsoleSettings, create_app
from tests.console.helpers import field, make_in_doubt, open_ticket

TOKEN = "t0ken-for-bad-input"


def _client(ledger: c4a.Ledger, **headers: bytes) -> TestClient:
    app = create_app(ledger, ConsoleSettings(operator="ann", token=TOKEN))
    return TestClient(app, base_url="http://127.0.0.1", headers=headers)


@pytest.fixture
def ann(ledger: c4a.Ledger) -> Iterator[TestClient]:
    with _client(ledger) as c:
        c.get(f"/?token={TOKEN}")
        yield c


def _refused(answer: Any, status: int, said: str) -> None:
    assert answer.status_code == status, answer.text[:500]
    text = html.unescape(answer.text)
    assert said in text
    assert '<p class="error" role="alert">' in text  # in the layout
    assert "Traceback" not in text


@pytest.mark.parametrize("token", ["tökén", "\u202etoken", "t0ken-for-bad-input\u00e9"])
def test_a_token_beyond_ascii_is_not_this_consoles(ledger: c4a.Ledger, token: str) -> None:
    with _client(ledger) as c:
        _refused(c.get("/", params={"token": token}), 401, "not this console's")
        bearer = {"Authorization": "Bearer " + token}
        _refused(c.get("/", headers={k: v.encode() for k, v in bearer.items()}), 401, "sign in")


def test_a_cookie_beyond_ascii_is_a_sign_in_page(ledger: c4a.Ledger) -> None:
    with _client(ledger, Cookie="c4a_console=t\u00f6ken".encode()) as c:
        _refused(c.get("/"), 401, "sign in with the address")


def test_a_csrf_value_beyond_ascii_changes_nothing(ann: TestClient, ledger: c4a.Ledger) -> None:
    request = open_ticket()
    page = ann.get(f"/approvals/{request.ticket}").text
    form = {"csrf": "ç" * 64, "fingerprint": field(page, "fingerprint"), "decision": "deny"}
    _refused(ann.post(f"/approvals/{request.ticket}", data=form), 403, "no valid CSRF token")
    assert ledger.approval(request.ticket).state == "pending"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "body",
    [b"\xff\xfe=\x00", b"csrf=%ff%fe&decision=deny", b"=&&==&decision"],
)
def test_a_malformed_form_changes_nothing(ann: TestClient, ledger: c4a.Ledger, body: bytes) -> None:
    request = open_ticket()
    answer = ann.post(
        f"/approvals/{request.ticket}",
        content=body,
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )
    assert answer.status_code in (400, 403), answer.text[:300]
    assert '<p class="error" role="alert">' in answer.text
    assert ledger.approval(request.ticket).state == "pending"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "path",
    ["/", "/runs", "/audit", "/doubt", "/health"],
)
@pytest.mark.parametrize("name", ["q", "tool", "run", "by"])
def test_a_filter_too_long_is_refused_with_what_to_do(
    ann: TestClient, path: str, name: str
) -> None:
    make_in_doubt()
    answer = ann.get(path, params={name: "x" * 50_000})
    _refused(answer, 400, f"the {name} filter is 50,000 characters long")
    assert "at most 1,000" in html.unescape(answer.text)


def test_a_filter_at_the_limit_is_served(ann: TestClient) -> None:
    open_ticket("long-run")
    for path in ("/", "/runs", "/audit"):
        assert ann.get(path, params={"q": "y" * 1000, "tool": "z" * 1000}).status_code == 200
