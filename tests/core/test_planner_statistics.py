"""An SQLite ledger keeps its planner's statistics current by itself (`PRAGMA optimize`, as
SQLite advises): nothing else ever analyzes it, and without statistics SQLite may read a large
table through the wrong index (the plan tests also run on a ledger never analyzed)."""

from __future__ import annotations

import sqlite3
import time

import pytest
from sqlalchemy import insert

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
