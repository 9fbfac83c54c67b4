"""The audit export carries the arguments each decision was about, redacted values masked as the
ticket's card showed them, in the same few reads however many entries it holds.

Requests go through Starlette's test client to the real app on a real ledger (both backends).
"""

from __future__ import annotations

import csv
import io
import json
from typing import Any

from sqlalchemy import Engine, event
from starlette.testclient import TestClient

import call4agents as c4a
from call4agents.console import ConsoleSettings, create_app
from tests.console.helpers import CARD, make_in_doubt, open_ticket

TOKEN = "t0ken-for-the-audit"


def _statements(c: TestClient, path: str) -> tuple[int, Any]:
    sent: list[str] = []

    def record(_c: Any, _cur: Any, statement: str, *_: Any) -> None:
        sent.append(statement)

    event.listen(Engine, "before_cursor_execute", record)
    try:
        answer = c.get(path)
    finally:
        event.remove(Engine, "before_cursor_execute", record)
    assert answer.status_code == 200, answer.text[:300]
    return len(sent), answer


def test_the_export_carries_the_arguments_as_the_card_showed_them(ledger: c4a.Ledger) -> None:
    app = create_app(ledger, ConsoleSettings(operator="ann", token=TOKEN))
    with TestClient(app, base_url="http://127.0.0.1") as c:
        c.get(f"/?token={TOKEN}")
        paid = open_ticket("refund-1", amount=40)
        ledger.approve(paid.ticket, by="ann", reason="known customer")
        doubt = make_in_doubt("mail-1")
        ledger.resolve(doubt.key, happened=False, by="bob", note="no trace")
        one, _ = _statements(c, "/audit?format=json")
        for i in range(2, 12):
            ledger.deny(open_ticket(f"refund-{i}", amount=i).ticket, by="ann")
        many, answer = _statements(c, "/audit?format=json")
        rows = answer.json()
        _, exported = _statements(c, "/audit?format=csv")
    assert many == one  # the arguments of every entry in two reads, not one per entry
    assert CARD not in answer.text
    assert CARD not in exported.text
    by_run = {row["run_id"]: row for row in rows}
    assert by_run["refund-1"]["args"] == {"amount": 40, "to": "alice", "card": "***"}
    assert by_run["refund-7"]["args"]["amount"] == 7
    assert by_run["mail-1"]["args"] == {"to": "bob@example.com"}  # the action settled
    table = {r["run_id"]: r for r in csv.DictReader(io.StringIO(exported.text))}
    assert json.loads(table["refund-1"]["args"]) == by_run["refund-1"]["args"]
    assert json.loads(table["mail-1"]["args"]) == {"to": "bob@example.com"}
