"""`call4agents stats` figures checked against a ledger with known contents."""

from __future__ import annotations

import json
from typing import Any

import pytest
from sqlalchemy import update

import call4agents as c4a
from call4agents.cli import main
from call4agents.stats import compute
from call4agents.tables import effects
from tests.conftest import Target


def cli_args(target: Target, *rest: str) -> list[str]:
    schema = ["--schema", target.schema] if target.schema else []
    return ["--url", target.url, *schema, *rest]


def fill(ledger: c4a.Ledger) -> None:
    """Runs a (in doubt), b (waiting for approval), c (a failure), d (done), e (escalated)."""

    @c4a.effect(name="send")
    def send(n: int) -> int:
        return n

    @c4a.effect(name="wire", kind="irreversible")
    def wire(amount: int) -> str:
        if amount < 0:
            raise TimeoutError("bank did not answer")
        return "ok"

    @c4a.effect(name="refund", approval=True)
    def refund(order: str) -> str:
        return "re"

    @c4a.effect(name="charge")
    def charge(amount: int) -> str:
        raise ValueError("declined")

    with c4a.run("a"):
        send(1)
        send(1)  # a dedup hit: not visible in the ledger
        send(2)
        wire(1)
        with pytest.raises(TimeoutError):
            wire(-1)
    with c4a.run("b"):
        send(1)
        with pytest.raises(c4a.ApprovalRequired):
            refund("o-1")
    with c4a.run("c"):
        with pytest.raises(ValueError):
            charge(5)
        wire(5)
    with c4a.run("d"):
        send(1)
    with c4a.run("e"):
        send(1)
        with pytest.raises(c4a.Escalated):
            c4a.escalate("customer asked for a manager")


def age_run(ledger: c4a.Ledger, run_id: str, seconds: float) -> None:
    """Make a run's actions look older (setting up known contents, not a clock)."""
    with ledger.store.tx() as conn:
        conn.execute(
            update(effects)
            .where(effects.c.run_id == run_id)
            .values(created_at=effects.c.created_at - seconds)
        )


EXPECTED: dict[str, Any] = {
    "actions": 9,
    "actions_by_state": {"succeeded": 7, "in_doubt": 1, "failed": 1},
    "retried_actions": 0,
    "dedup_rate": None,
    "in_doubt": 1,
    "approvals_waiting": 1,
    "irreversible_executions": 3,
    "irreversible_per_run": {"a": 2, "c": 1},
    "runs_by_state": {
        "done": 1,
        "escalated": 1,
        "has_failures": 1,
        "in_doubt": 1,
        "waiting_approval": 1,
    },
}


def test_stats_figures(target: Target) -> None:
    ledger = c4a.init(target.open())
    fill(ledger)
    found = compute(ledger).as_dict()
    assert {k: found[k] for k in EXPECTED} == EXPECTED
    assert found["in_doubt_oldest_age"] >= 0
    assert found["approvals_oldest_age"] >= 0
    assert "not written to the ledger" in found["dedup_note"]


def test_stats_cli_window(target: Target, capsys: pytest.CaptureFixture[str]) -> None:
    ledger = c4a.init(target.open())
    fill(ledger)
    age_run(ledger, "d", 2 * 86400)
    capsys.readouterr()
    assert main(cli_args(target, "stats", "--json", "--since", "24h")) == 0
    found = json.loads(capsys.readouterr().out)
    assert found["since_seconds"] == 86400
    assert found["actions"] == 8
    assert "done" not in found["runs_by_state"]
    assert found["irreversible_per_run"] == {"a": 2, "c": 1}
    assert main(cli_args(target, "stats")) == 0
    text = capsys.readouterr().out
    assert "In doubt (open):          1, oldest" in text
    assert "Approvals waiting:        1, oldest" in text
    assert "Irreversible executions:  3 (a: 2, c: 1)" in text
    assert "Dedup rate:               n/a" in text
