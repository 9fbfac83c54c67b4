"""The queries that list open actions are served by an index at any ledger size, on both databases.

`doubt`, the lease sweep, the open-figures gauges and `doctor` ask for actions that are started or
in doubt: a handful among millions. The partial index ``c4a_effects_open`` holds only those, but
SQLite uses a partial index only when a query repeats its condition with the same literal values;
these tests record the statements the real operations send and ask each database for its plan.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import Engine, event, insert, text

import call4agents as c4a
from call4agents import stats
from call4agents.cli import main
from call4agents.tables import effects
from tests.conftest import Target

ROWS = 20_000


def _fill(ledger: c4a.Ledger) -> None:
    now = time.time()
    rows = [
        {
            "key": f"k{i:08d}",
            "run_id": f"run-{i // 10}",
            "tool": "t",
            "kind": "write",
            "state": "in_doubt" if i % 5000 == 0 else "succeeded",
            "attempt": 1,
            "args": "{}",
            "created_at": now,
            "updated_at": now,
        }
        for i in range(ROWS)
    ]
    with ledger.engine.begin() as conn:
        conn.execute(insert(effects), rows)
        if ledger.dialect == "postgresql":
            table = f'"{ledger.schema}".c4a_effects' if ledger.schema else "c4a_effects"
            conn.execute(text(f"ANALYZE {table}"))
        else:
            conn.exec_driver_sql("ANALYZE")


def _sent(engine: Engine, operation: Callable[[], Any]) -> list[tuple[str, Any]]:
    seen: list[tuple[str, Any]] = []

    def record(_c: Any, _cur: Any, statement: str, params: Any, _ctx: Any, _many: bool) -> None:
        if statement.lstrip().upper().startswith("SELECT") and "c4a_effects" in statement:
            seen.append((statement, params))

    event.listen(engine, "before_cursor_execute", record)
    try:
        operation()
    finally:
        event.remove(engine, "before_cursor_execute", record)
    return seen


def _plan(engine: Engine, statement: str, params: Any) -> str:
    with engine.connect() as conn:
        if engine.dialect.name == "sqlite":
            rows = conn.exec_driver_sql("EXPLAIN QUERY PLAN " + statement, params).all()
            return "\n".join(str(r[-1]) for r in rows)
        rows = conn.exec_driver_sql("EXPLAIN " + statement, params).all()
        return "\n".join(str(r[0]) for r in rows)


@pytest.mark.slow
def test_open_action_queries_use_the_open_index(target: Target) -> None:
    ledger = target.open()
    _fill(ledger)
    operations: dict[str, Callable[[], Any]] = {
        "in_doubt": ledger.in_doubt,
        "sweep": ledger.sweep,
        "open_figures": lambda: stats.open_figures(ledger),
    }
    for name, operation in operations.items():
        sent = _sent(ledger.engine, operation)
        assert sent, f"{name} sent no query"
        for statement, params in sent:
            plan = _plan(ledger.engine, statement, params)
            assert "c4a_effects_open" in plan, f"{name}:\n{statement}\n{plan}"
            assert "SCAN c4a_effects\n" not in plan + "\n"
            assert "Seq Scan on c4a_effects" not in plan
    assert len(ledger.in_doubt()) == ROWS // 5000


def test_doctor_counts_open_actions(
    sqlite_target: Target, capsys: pytest.CaptureFixture[str]
) -> None:
    _fill(sqlite_target.open())
    assert main(["doctor", "--url", sqlite_target.url]) == 0
    assert "0 started, 4 in doubt" in capsys.readouterr().out
