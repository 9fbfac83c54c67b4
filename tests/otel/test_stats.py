"""`call4agents stats` figures checked against a ledger with known contents."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import update

import call4agents as c4a
from call4agents.controls.stats import compute
from call4agents.facade.cli import main
from call4agents.storage.tables import changes, effects
from tests.conftest import Target
from tests.otel.conftest import backdate


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
        send(1)  # a dedup hit, counted in memory
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
        # And the changes logged for them, not yet folded into the figures over time.
        conn.execute(
            update(changes)
            .where(changes.c.run_id == run_id)
            .values(created_at=changes.c.created_at - seconds)
        )


EXPECTED: dict[str, Any] = {
    "actions": 9,
    "actions_by_state": {"succeeded": 7, "in_doubt": 1, "failed": 1},
    "retried_actions": 0,
    "executions": 9,
    "deduped": 1,
    "dedup_rate": 0.1,
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
    assert compute(ledger).deduped == 0  # still in memory, on its way
    ledger.dedup.flush()
    found = compute(ledger).as_dict()
    assert {k: found[k] for k in EXPECTED} == EXPECTED
    assert "written every few seconds" in found["dedup_note"]


def test_stats_ages_against_known_ages(target: Target, capsys: pytest.CaptureFixture[str]) -> None:
    ledger = c4a.init(target.open())
    fill(ledger)
    backdate(ledger, in_doubt_for=600, waiting_for=2 * 3600)
    found = compute(ledger)
    assert found.in_doubt_oldest_age is not None
    assert 600 <= found.in_doubt_oldest_age < 660  # plus the moments since the rows were written
    assert found.approvals_oldest_age is not None
    assert 7200 <= found.approvals_oldest_age < 7260
    capsys.readouterr()
    assert main(cli_args(target, "stats")) == 0
    text = capsys.readouterr().out
    assert "In doubt (open):          1, oldest 10." in text  # minutes
    assert "Approvals waiting:        1, oldest 2.0h" in text


def test_stats_cli_window(target: Target, capsys: pytest.CaptureFixture[str]) -> None:
    ledger = c4a.init(target.open())
    fill(ledger)
    ledger.dedup.flush()
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
    assert "Dedup rate:               10.0% (1 served from the record, 9 executed)" in text


def test_dedup_hits_of_other_processes_are_counted(target: Target, tmp_path: Path) -> None:
    """Repeats in a process that then exits (cache hits and rows read from the ledger)."""
    ledger = c4a.init(target.open())
    script = tmp_path / "repeats.py"
    script.write_text(REPEATS)
    for _ in range(2):  # the second process meets recorded rows, not its own cache
        done = subprocess.run(
            [sys.executable, str(script)], env=target.env(), capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
    found = compute(ledger)
    # First process: 3 executions and 3 cache hits; second: 6 repeats read from the ledger.
    assert (found.executions, found.deduped) == (3, 9)
    assert found.dedup_rate == pytest.approx(0.75)


REPEATS = """
import os

import call4agents as c4a

c4a.init(os.environ["C4A_TEST_URL"], schema=os.environ.get("C4A_TEST_SCHEMA") or None)


@c4a.effect(name="notify")
def notify(n: int) -> int:
    return n


with c4a.run("r"):
    for n in (1, 2, 3, 1, 2, 3):
        notify(n)
"""


def test_counts_reach_the_ledger_on_their_own(
    target: Target, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No close() and no exit: the timer writes them (here after 0.1 s instead of seconds)."""
    from call4agents.storage import tally

    monkeypatch.setattr(tally, "FLUSH_AFTER", 0.1)
    ledger = c4a.init(target.open())

    @c4a.effect(name="ping")
    def ping() -> str:
        return "pong"

    with c4a.run("t"):
        for _ in range(4):
            ping()
    deadline = time.monotonic() + 30
    while compute(ledger).deduped < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert compute(ledger).deduped == 3


def test_gc_leaves_the_repeats_counted(target: Target) -> None:
    """Repeats are tallies like the other figures: gc drops old actions' payloads (and failed
    actions, which leave the figures), never the count of repeats served."""
    ledger = c4a.init(target.open())
    fill(ledger)
    ledger.dedup.flush()
    ledger.gc(older_than=0)
    found = compute(ledger)
    assert found.deduped == 1
    assert found.executions == EXPECTED["executions"] - 1  # the failed charge went
