"""A yes is spent atomically with the intent: crashes and races around it, with real processes."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests import forked
from tests.conftest import Target, run_child

CHILD = Path(__file__).with_name("agent_child.py")

# point -> (exit code of the resume, emails after it, ticket state after the crash)
MATRIX = {
    "before_intent": (0, 1, "approved"),
    "after_intent": (3, 0, "spent"),
    "inside_tool": (3, 1, "spent"),
    "after_tool_before_result": (3, 1, "spent"),
    "after_result": (0, 1, "spent"),
}


def cli(target: Target, *args: str) -> subprocess.CompletedProcess[str]:
    url = ["--url", target.url] + (["--schema", target.schema] if target.schema else [])
    return subprocess.run(
        [sys.executable, "-m", "call4agents", *args, *url],
        env=target.env(),
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def approve_request(target: Target, outbox: Path, env: dict[str, str]) -> str:
    asked = run_child(CHILD, "none", "t", str(outbox), env=env)
    assert asked.returncode == 5, asked.stderr
    request = json.loads(asked.stdout)["approval"]
    assert request["args"] == {"to": "bob@example.com"}
    approved = cli(target, "approve", request["ticket"], "--by", "ann", "--reason", "ok")
    assert approved.returncode == 0, approved.stderr
    assert "Approved send_email" in approved.stdout
    return str(request["ticket"])


@pytest.mark.parametrize("point", list(MATRIX))
def test_crash_around_a_spent_approval(target: Target, tmp_path: Path, point: str) -> None:
    outbox = tmp_path / "outbox.jsonl"
    env = dict(target.env(), APPROVAL="1")
    ticket = approve_request(target, outbox, env)
    assert run_child(CHILD, point, "t", str(outbox), env=env).returncode == -signal.SIGKILL
    resume_code, sent, state = MATRIX[point]
    [found] = [a for a in target.open().approvals("t") if a.ticket == ticket]
    assert found.state == state  # spent exactly when the intent was written, never apart
    resumed = run_child(CHILD, "none", "t", str(outbox), env=env)
    assert resumed.returncode == resume_code, resumed.stdout + resumed.stderr
    lines = outbox.read_text().splitlines() if outbox.exists() else []
    assert len(lines) == sent


def test_two_processes_race_for_one_yes(target: Target, tmp_path: Path) -> None:
    outbox = tmp_path / "outbox.jsonl"
    env = dict(target.env(), APPROVAL="1", TOOL_SECONDS="0.5")
    approve_request(target, outbox, env)
    workers = forked.run_together(CHILD, [(["none", "t", str(outbox)], env)] * 2, timeout=60)
    assert [w.returncode for w in workers] == [0, 0], [w.stderr for w in workers]
    first, second = (json.loads(w.stdout) for w in workers)
    assert first == second  # one ran, the other got its result
    assert len(outbox.read_text().splitlines()) == 1


def test_cli_deny_and_listing(target: Target, tmp_path: Path) -> None:
    outbox = tmp_path / "outbox.jsonl"
    env = dict(target.env(), APPROVAL="1")
    asked = run_child(CHILD, "none", "t", str(outbox), env=env)
    ticket = json.loads(asked.stdout)["approval"]["ticket"]
    waiting = cli(target, "approvals")
    assert ticket in waiting.stdout
    assert "pending" in waiting.stdout
    denied = cli(target, "deny", ticket, "--by", "ann", "--reason", "not this customer")
    assert denied.returncode == 0
    assert cli(target, "approvals").stdout.strip() == "No approvals waiting."
    refused = run_child(CHILD, "none", "t", str(outbox), env=env)
    assert refused.returncode == 1
    assert "ApprovalDenied" in refused.stderr
    assert "not this customer" in refused.stderr
    assert not outbox.exists()
    bad = cli(target, "approve", "apr_nope", "--by", "ann")
    assert bad.returncode == 2
    assert bad.stderr.startswith("call4agents: error: no approval ticket")
