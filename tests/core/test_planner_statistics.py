"""An SQLite ledger keeps its planner's statistics current by itself (`PRAGMA optimize`, as
SQLite advises): nothing else ever analyzes it, and without statistics SQLite may read a large
table through the wrong index (the plan tests also run on a ledger never analyzed)."""

from __future__ import annotations

import sqlite3
import time
from typing import Any

import pytest
from sqlalchemy import event, insert

import call4agents as c4a
from call4agents.storage import _db
from call4agents.storage.tables import approvals
from tests.conftest import Target


def _tickets(ledger: c4a.Ledger, n: int) -> None:
    now = time.time()
    rows = [
        {
            "ticket": f"t{i:08d}",
            "key": f"k{i:063d}",
            "for_attempt": 1,
            "run_id": f"run-{i}",
            "tool": "t",
            "args": "{}",
            "state": "pending" if i % 100 == 0 else "spent",
            "requested_at": now - i,
            "expires_at": now + 3600,
            "signature": "x",
        }
        for i in range(n)
    ]
    with ledger.engine.begin() as conn:
        conn.execute(insert(approvals), rows)


def _analyzed(path: str) -> set[str]:
    with sqlite3.connect(path) as conn:
        found = "SELECT 1 FROM sqlite_master WHERE name = 'sqlite_stat1'"
        if conn.execute(found).fetchone() is None:
            return set()
        return {table for (table,) in conn.execute("SELECT tbl FROM sqlite_stat1")}


def test_a_ledger_analyzes_the_tables_it_used_when_it_closes(sqlite_target: Target) -> None:
    ledger = sqlite_target.open()
    _tickets(ledger, 5000)
    ledger.close()
    path = sqlite_target.url.removeprefix("sqlite:///")
    assert "c4a_approvals" not in _analyzed(path)
    ledger = c4a.Ledger(sqlite_target.url)
    assert len(ledger.waiting(limit=100)) == 50
    ledger.close()
    assert "c4a_approvals" in _analyzed(path)


def test_a_long_lived_ledger_analyzes_as_it_goes_and_leaves_analyze_unlimited(
    sqlite_target: Target, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_db, "OPTIMIZE_EVERY", 0.0)  # every return to the pool
    ledger = sqlite_target.open()
    _tickets(ledger, 5000)
    path = sqlite_target.url.removeprefix("sqlite:///")
    ledger.waiting(limit=10)
    ledger.waiting(limit=10)  # its return to the pool analyzes what the first used
    assert "c4a_approvals" in _analyzed(path)
    with ledger.engine.connect() as conn:  # an ANALYZE someone asks for reads every row
        assert conn.exec_driver_sql("PRAGMA analysis_limit").scalar_one() == 0
    ledger.close()


def test_a_read_only_ledger_file_keeps_its_statistics_quietly(sqlite_target: Target) -> None:
    ledger = sqlite_target.open()
    _tickets(ledger, 500)
    ledger.close()
    path = sqlite_target.url.removeprefix("sqlite:///")
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
        _db.optimize_sqlite(conn, opening=True)
        conn.execute("SELECT count(*) FROM c4a_approvals WHERE run_id = 'run-1'").fetchall()
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            conn.execute("PRAGMA optimize").fetchall()  # it would analyze, and may not write
        _db.optimize_sqlite(conn)  # so the ledger's own turn passes quietly
    assert "c4a_approvals" not in _analyzed(path)


def test_a_console_on_a_ledger_never_analyzed_finds_each_yes_by_the_tickets_key(
    sqlite_target: Target, monkeypatch: pytest.MonkeyPatch
) -> None:
    """/health's "executed without a yes" over a window looks up each action's approval by the
    tickets' key index. Without statistics SQLite reads it through the index of open tickets
    instead, every approved ticket of the window for each action: with 3,000 approved and run
    in a day, 3 s a page. SQLite before 3.46 analyzes only at a connection's next `PRAGMA
    optimize` (ten minutes, for a console), so the ledger analyzes what it never did as each
    connection opens (``_db._analyze_new_tables``); this checks the plan the console's own
    connections then use."""
    from starlette.testclient import TestClient

    from call4agents.console import ConsoleSettings, create_app
    from call4agents.storage.tables import effects

    with monkeypatch.context() as never:  # filled as a ledger nobody ever analyzed
        never.setattr(_db, "optimize_sqlite", lambda conn, **_: None)
        ledger = c4a.init(sqlite_target.open())
        now = time.time()
        tickets = [
            {"ticket": f"apr_{i:020d}", "key": f"{i:064x}", "for_attempt": 1, "run_id": f"r{i}"}
            for i in range(2000)
        ]
        with ledger.engine.begin() as conn:
            for i, t in enumerate(tickets):
                t.update(tool="pay", args="{}", state="spent", signature="x", decided_by="ann")
                t.update(requested_at=now - i * 30, expires_at=now - i * 30 + 3600)
            conn.execute(insert(approvals), tickets)
            ran = [
                {"key": t["key"], "run_id": t["run_id"], "tool": "pay", "kind": "irreversible"}
                | {"state": "succeeded", "attempt": 1, "args": "{}"}
                | {"created_at": t["requested_at"] + 5, "updated_at": t["requested_at"] + 6}
                for t in tickets
            ]
            conn.execute(insert(effects), ran)
        ledger.close()
    path = sqlite_target.url.removeprefix("sqlite:///")
    assert _analyzed(path) == set()
    ledger = sqlite_target.open()  # as `call4agents console` opens it
    sent: list[tuple[str, Any]] = []

    def record(_c: Any, _cur: Any, statement: str, params: Any, _ctx: Any, _many: bool) -> None:
        if "c4a_approvals AS yes" in statement:
            sent.append((statement, params))

    app = create_app(ledger, ConsoleSettings(operator="ann", token="t"))
    event.listen(ledger.engine, "before_cursor_execute", record)
    with TestClient(app, base_url="http://127.0.0.1") as client:
        assert client.get("/health?since=24h&token=t").status_code == 200
    event.remove(ledger.engine, "before_cursor_execute", record)
    assert sent, "the health page no longer asks for a yes by key: update this test"
    for statement, params in sent:
        with ledger.engine.connect() as conn:  # one of the console's pooled connections
            rows = conn.exec_driver_sql("EXPLAIN QUERY PLAN " + statement, params).all()
        lookups = [str(r[-1]) for r in rows if str(r[-1]).startswith("SEARCH yes")]
        assert lookups, statement
        for lookup in lookups:
            assert "USING INDEX c4a_approvals_key" in lookup, lookup
