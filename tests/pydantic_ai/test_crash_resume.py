"""A real child Pydantic AI agent SIGKILLed mid-conversation, then resumed from its saved history.

The app saves the message history after every step. Killed after the email went out and before
the history with its result was saved, a plain resume re-runs the call from the saved history and
sends a second email; with OnceOnly the resume gets the recorded result. Killed inside the tool,
OnceOnly cannot know whether the email went out: it sends nothing more and the model is told the
call is in doubt.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Target, run_child

CHILD = Path(__file__).with_name("agent_child.py")


def emails(workdir: Path) -> list[str]:
    outbox = workdir / "outbox.jsonl"
    lines = outbox.read_text().splitlines() if outbox.exists() else []
    return [json.loads(line)["to"] for line in lines]


def start(mode: str, crash: str, driver: str, workdir: Path, env: dict[str, str]) -> Any:
    return run_child(CHILD, mode, crash, driver, "ticket-42", str(workdir), env=env)


def kill_then_resume(
    mode: str, crash: str, workdir: Path, env: dict[str, str], driver: str = "iter"
) -> list[list[Any]]:
    killed = start(mode, crash, "iter", workdir, env)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert (workdir / "history.json").exists()  # the step with the tool call was saved
    resumed = start(mode, "none", driver, workdir, env)
    assert resumed.returncode == 0, resumed.stderr
    done = json.loads(resumed.stdout)
    assert done["conversation"] == "ticket-42"  # recovered from the saved history
    returns: list[list[Any]] = json.loads(done["output"])
    return returns


def test_killed_after_sending_without_call4agents_sends_twice(
    sqlite_target: Target, tmp_path: Path
) -> None:
    returns = kill_then_resume("plain", "after_tool", tmp_path, sqlite_target.env())
    assert emails(tmp_path) == ["customer0@example.com"] * 2
    assert returns == [["send_email", "sent to customer0@example.com", "success"]]


def test_killed_after_sending_with_once_only_sends_once(target: Target, tmp_path: Path) -> None:
    returns = kill_then_resume("ledger", "after_tool", tmp_path, target.env())
    assert emails(tmp_path) == ["customer0@example.com"]
    # The model gets the result recorded before the crash, as if nothing had happened.
    assert returns == [["send_email", "sent to customer0@example.com", "success"]]


@pytest.mark.parametrize("driver", ["run", "run_sync", "run_stream"])
def test_every_way_of_running_resumes_without_sending_again(
    sqlite_target: Target, tmp_path: Path, driver: str
) -> None:
    returns = kill_then_resume("ledger", "after_tool", tmp_path, sqlite_target.env(), driver)
    assert emails(tmp_path) == ["customer0@example.com"]
    assert returns == [["send_email", "sent to customer0@example.com", "success"]]


def test_killed_inside_the_tool_is_in_doubt_and_not_resent(target: Target, tmp_path: Path) -> None:
    env = dict(target.env(), TOOL="async")
    [(name, content, outcome)] = kill_then_resume("ledger", "inside_tool", tmp_path, env)
    assert emails(tmp_path) == ["customer0@example.com"]
    assert (name, outcome) == ("send_email", "retried")  # a tool error, counted by retries=
    assert "may or may not have run" in content
    assert "NOT run again" in content
    [doubt] = target.open().in_doubt()
    assert (doubt.run_id, doubt.tool) == ("ticket-42", "send_email")


def test_killed_inside_the_tool_without_call4agents_sends_twice(
    sqlite_target: Target, tmp_path: Path
) -> None:
    kill_then_resume("plain", "inside_tool", tmp_path, sqlite_target.env())
    assert emails(tmp_path) == ["customer0@example.com"] * 2


def test_parallel_calls_killed_after_sending_each_send_once(target: Target, tmp_path: Path) -> None:
    env = dict(target.env(), CALLS="3", TOOL="async")
    returns = kill_then_resume("ledger", "after_tool", tmp_path, env, driver="run")
    people = [f"customer{i}@example.com" for i in range(3)]
    assert sorted(emails(tmp_path)) == people
    assert sorted(r[1] for r in returns) == [f"sent to {p}" for p in people]


def test_a_third_start_changes_nothing(sqlite_target: Target, tmp_path: Path) -> None:
    kill_then_resume("ledger", "after_tool", tmp_path, sqlite_target.env())
    (tmp_path / "history.json").unlink()  # even a restart from the very first prompt
    again = start("ledger", "none", "iter", tmp_path, sqlite_target.env())
    assert again.returncode == 0, again.stderr
    assert emails(tmp_path) == ["customer0@example.com"]
