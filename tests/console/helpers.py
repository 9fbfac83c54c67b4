"""What the console tests share: a ledger with a waiting ticket, an in-doubt action and a run."""

from __future__ import annotations

import re
from typing import Any

import pytest

import call4agents as c4a

CARD = "4242-4242-4242-4242"


def pay_tool(**options: Any) -> Any:
    """``pay``, which charges a redacted card and needs a person's yes."""

    @c4a.effect(name="pay", kind="irreversible", approval=True, redact=("card",), **options)
    def pay(amount: int, to: str, card: str = CARD) -> str:
        return f"paid {amount} to {to}"

    return pay


def open_ticket(
    run_id: str = "refund-7", amount: int = 40, card: str = CARD, **options: Any
) -> c4a.ApprovalRequest:
    """A pending ticket for ``pay``."""
    with c4a.run(run_id), pytest.raises(c4a.ApprovalRequired) as info:
        pay_tool(**options)(amount, "alice", card)
    request = info.value.request
    assert isinstance(request, c4a.ApprovalRequest)
    return request


def make_in_doubt(run_id: str = "mail-3") -> c4a.EffectRecord:
    @c4a.effect(name="send_email", kind="write")
    def send_email(to: str) -> str:
        raise TimeoutError("the mail server did not answer")

    with c4a.run(run_id), pytest.raises(TimeoutError):
        send_email("bob@example.com")
    [record] = [r for r in c4a.default_ledger().in_doubt() if r.run_id == run_id]
    return record


def field(page: str, name: str) -> str:
    found = re.search(rf'name="{name}" value="([^"]*)"', page)
    assert found, f"no {name} field on the page"
    return found.group(1)


def signed_in(ledger: c4a.Ledger, token: str, **settings: str) -> Any:
    """A test client of a console opened with ``token`` (``operator="ann"`` unless told),
    already signed in by it."""
    from starlette.testclient import TestClient

    from call4agents.console import ConsoleSettings, create_app

    values = {"operator": "ann", "token": token, **settings}
    c = TestClient(create_app(ledger, ConsoleSettings(**values)), base_url="http://127.0.0.1")
    c.get(f"/?token={token}")
    return c
