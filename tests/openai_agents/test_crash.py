"""Real child processes running a real Agent, SIGKILLed at the named moment, then run again.

The child is the quickstart's agent (``call4agents_openai_agents.quickstart._child``, forked):
a support agent with an ``SQLiteSession`` emails bob@example.com; emails are counted in an outbox
file the tool writes outside the ledger.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import uuid
from pathlib import Path

from agents import SQLiteSession

from call4agents_openai_agents.quickstart import emails, result, spawn
from tests.conftest import Target


def run_child(mode: str, crash: str, workdir: Path, target: Target, run_id: str) -> int:
    child = spawn(mode, crash, workdir, target.url, run_id, schema=target.schema, env=target.env())
    with child:
        code = child.wait(180)
        assert code in (0, -signal.SIGKILL), child.stderr
    return code


def saved_outputs(workdir: Path, mode: str, run_id: str) -> list[object]:
    """The tool outputs the SDK saved to the session before the child died."""
    session = SQLiteSession(run_id, str(workdir / f"oa-session-{mode}.db"))
    items = asyncio.run(session.get_items())
    return [i for i in items if i.get("type") == "function_call_output"]


def test_without_call4agents_the_resumed_run_sends_again(
    sqlite_target: Target, tmp_path: Path
) -> None:
    run_id = f"job-{uuid.uuid4().hex[:6]}"
    assert run_child("plain", "after", tmp_path, sqlite_target, run_id) == -signal.SIGKILL
    assert emails(tmp_path, "plain") == 1
    assert saved_outputs(tmp_path, "plain", run_id) == []  # killed before the session was saved
    assert run_child("plain", "none", tmp_path, sqlite_target, run_id) == 0
    assert emails(tmp_path, "plain") == 2


def test_killed_after_sending_the_resumed_run_gets_the_recorded_result(
    target: Target, tmp_path: Path
) -> None:
    run_id = f"job-{uuid.uuid4().hex[:6]}"
    assert run_child("once", "after", tmp_path, target, run_id) == -signal.SIGKILL
    assert emails(tmp_path, "once") == 1
    assert saved_outputs(tmp_path, "once", run_id) == []
    assert run_child("once", "none", tmp_path, target, run_id) == 0
    assert emails(tmp_path, "once") == 1
    assert result(tmp_path, "once")["tool_outputs"] == ["email sent to bob@example.com"]
    [record] = target.open().effects(run_id)
    assert (record.tool, record.state) == ("send_email", "succeeded")


def test_killed_inside_the_tool_the_model_is_told_it_is_in_doubt(
    target: Target, tmp_path: Path
) -> None:
    run_id = f"job-{uuid.uuid4().hex[:6]}"
    assert run_child("once", "inside", tmp_path, target, run_id) == -signal.SIGKILL
    assert emails(tmp_path, "once") == 1
    assert run_child("once", "none", tmp_path, target, run_id) == 0
    assert emails(tmp_path, "once") == 1
    [output] = result(tmp_path, "once")["tool_outputs"]
    assert "may or may not have run" in output
    assert "died while running it" in output
    [doubt] = target.open().in_doubt()
    assert (doubt.run_id, doubt.tool) == (run_id, "send_email")
    assert run_child("once", "none", tmp_path, target, run_id) == 0  # and again: still one
    assert emails(tmp_path, "once") == 1


def test_the_quickstart_rows(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "call4agents_openai_agents.quickstart"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    rows = [line for line in done.stdout.splitlines() if line.startswith("OpenAI")]
    assert [row.split("  ")[0].strip() for row in rows] == [
        "OpenAI Agents SDK, killed after sending, without Call4Agents",
        "OpenAI Agents SDK, killed after sending, with Call4Agents",
    ]
    assert [row.split()[row.split().index("Call4Agents") + 1] for row in rows] == ["2", "1"]
