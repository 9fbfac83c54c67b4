"""Listings read a page in a fixed number of queries, however many runs wait or ended: `runs`
once made one query per run waiting on a person (1,000 waiting took ~10 s on PostgreSQL).

Each test counts the statements the real command or page sends (SQLAlchemy's
``before_cursor_execute``) with one and with fifty of a thing, on both databases.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import Engine, event
from starlette.testclient import TestClient

import call4agents as c4a
from call4agents.console import ConsoleSettings, create_app
from call4agents.facade.cli import main
from tests.conftest import Target
from tests.console.helpers import open_ticket


def _statements(operation: Callable[[], Any]) -> int:
    sent: list[str] = []

    def record(_c: Any, _cur: Any, statement: str, *_: Any) -> None:
        sent.append(statement)

    event.listen(Engine, "before_cursor_execute", record)
    try:
        operation()
    finally:
        event.remove(Engine, "before_cursor_execute", record)
    return len(sent)


def _act(run_id: str) -> None:
    @c4a.effect(name="lookup", kind="write")
    def lookup(order: int) -> int:
        return order

    with c4a.run(run_id):
        lookup(1)


def test_runs_reads_its_page_in_the_same_queries_for_1_or_50_waiting(
    target: Target, capsys: pytest.CaptureFixture[str]
) -> None:
    c4a.init(target.open())
    where = ["--url", target.url, *(["--schema", target.schema] if target.schema else [])]

    def runs() -> None:
        assert main(["runs", "--limit", "100", *where]) == 0

    _act("busy-0")
    open_ticket("only-waits-0")
    open_ticket("busy-0", amount=1)
    one = _statements(runs)
    assert "only-waits-0" in capsys.readouterr().out
    for i in range(1, 50):
        _act(f"busy-{i}")
        open_ticket(f"only-waits-{i}")  # a run whose only record is a waiting ticket
        open_ticket(f"busy-{i}", amount=i + 1)
    fifty = _statements(runs)
    out = capsys.readouterr().out
    assert out.count("only-waits-") == 50
    assert out.count("busy-") == 50
    assert fifty == one


def test_the_runs_page_reads_the_endings_of_its_runs_at_once(ledger: c4a.Ledger) -> None:
    app = create_app(ledger, ConsoleSettings(operator="ann", token="t0ken-listing"))
    with TestClient(app, base_url="http://127.0.0.1") as client:
        client.get("/?token=t0ken-listing")

        def page() -> str:
            answer = client.get("/runs?active=all")
            assert answer.status_code == 200
            return answer.text

        def escalated(run_id: str) -> None:
            _act(run_id)
            with c4a.run(run_id), pytest.raises(c4a.Escalated):
                c4a.escalate("a person must look")

        escalated("esc-0")
        open_ticket("waits-0")
        one = _statements(page)
        for i in range(1, 50):
            escalated(f"esc-{i}")
            open_ticket(f"waits-{i}")
        fifty = _statements(page)
        shown = page()
    assert shown.count("escalated") >= 50
    assert fifty == one
