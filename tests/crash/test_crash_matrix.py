"""The crash matrix: a real child process SIGKILLed at each moment of one action, then resumed.

Emails are counted in an outbox file the tool writes outside the ledger. After the resume there
is exactly one email, or an honest in-doubt (never two), and the resume never waits out a lease.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Target, run_child

CHILD = Path(__file__).with_name("agent_child.py")

# point -> (emails after the crash, exit code of the resume, emails after the resume)
MATRIX = {
    "before_intent": (0, 0, 1),
    "after_intent": (0, 3, 0),
    "inside_tool": (1, 3, 1),
    "after_tool_before_result": (1, 3, 1),
    "after_result": (1, 0, 1),
}


def emails(outbox: Path) -> int:
    return len(outbox.read_text().splitlines()) if outbox.exists() else 0


@pytest.mark.parametrize("point", list(MATRIX))
def test_crash_then_resume(target: Target, tmp_path: Path, point: str) -> None:
    outbox = tmp_path / "outbox.jsonl"
    crashed = run_child(CHILD, point, "ticket-7", str(outbox), env=target.env())
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    after_crash, resume_code, after_resume = MATRIX[point]
    assert emails(outbox) == after_crash

    resumed = run_child(CHILD, "none", "ticket-7", str(outbox), env=target.env())
    assert resumed.returncode == resume_code, resumed.stdout + resumed.stderr
    assert emails(outbox) == after_resume
    if resume_code == 3:  # in doubt: it names the worker that died, and the way out
        message = json.loads(resumed.stdout)["in_doubt"]
        assert "died while running it" in message
        assert "call4agents resolve" in message
        ledger = target.open()
        [doubt] = ledger.in_doubt()
        assert doubt.run_id == "ticket-7"

    again = run_child(CHILD, "none", "ticket-7", str(outbox), env=target.env())
    assert again.returncode == resume_code
    assert emails(outbox) == after_resume  # a third start changes nothing


@pytest.mark.parametrize("point", ["after_intent", "inside_tool", "after_tool_before_result"])
def test_retry_in_doubt_resends_under_the_same_key(
    target: Target, tmp_path: Path, point: str
) -> None:
    outbox = tmp_path / "outbox.jsonl"
    env = dict(target.env(), RETRY_IN_DOUBT="1")
    assert run_child(CHILD, point, "t", str(outbox), env=env).returncode == -signal.SIGKILL
    resumed = run_child(CHILD, "none", "t", str(outbox), env=env)
    assert resumed.returncode == 0, resumed.stderr
    [result] = json.loads(resumed.stdout)["results"]
    assert result["attempt"] == 2
    assert emails(outbox) == 1  # the provider dropped the re-sent duplicate, if there was one


def test_resolved_doubt_returns_the_recorded_result(target: Target, tmp_path: Path) -> None:
    outbox = tmp_path / "outbox.jsonl"
    run_child(CHILD, "inside_tool", "t", str(outbox), env=target.env())
    assert run_child(CHILD, "none", "t", str(outbox), env=target.env()).returncode == 3
    ledger = target.open()
    [doubt] = ledger.in_doubt()
    ledger.resolve(doubt.key, happened=True, result={"delivered_to": "bob@example.com"}, by="ann")
    resumed = run_child(CHILD, "none", "t", str(outbox), env=target.env())
    assert resumed.returncode == 0
    assert json.loads(resumed.stdout)["results"] == [{"delivered_to": "bob@example.com"}]
    assert emails(outbox) == 1


def test_resolved_did_not_happen_runs_once_more(target: Target, tmp_path: Path) -> None:
    outbox = tmp_path / "outbox.jsonl"
    run_child(CHILD, "after_intent", "t", str(outbox), env=target.env())
    ledger = target.open()
    [doubt] = ledger.in_doubt()  # judged without waiting: its owner's pid is gone
    ledger.resolve(doubt.key, happened=False, by="ann", note="not in the provider's log")
    resumed = run_child(CHILD, "none", "t", str(outbox), env=target.env())
    assert resumed.returncode == 0
    assert emails(outbox) == 1


def test_many_actions_crash_half_way(target: Target, tmp_path: Path) -> None:
    outbox = tmp_path / "outbox.jsonl"
    people = [f"user{i}@example.com" for i in range(5)]
    env: dict[str, Any] = dict(target.env())
    crashed = run_child(CHILD, "after_result", "batch", str(outbox), *people, env=env)
    assert crashed.returncode == -signal.SIGKILL
    assert emails(outbox) == 1
    resumed = run_child(CHILD, "none", "batch", str(outbox), *people, env=env)
    assert resumed.returncode == 0
    assert sorted(json.loads(line)["to"] for line in outbox.read_text().splitlines()) == people
