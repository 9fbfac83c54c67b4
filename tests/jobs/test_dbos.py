"""DBOS workflows under ``call4agents_jobs.dbos.OnceOnly``: a process killed inside a step, the
workflow recovered by DBOS in a fresh process.

Each workflow sends one email from a step; the emails are counted in a file outside the ledger.
DBOS keeps its system database in SQLite, the ledger is SQLite too.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import EXAMPLES, Target, run_child, run_example

pytestmark = pytest.mark.slow  # worker processes killed and recovered: seconds a test
CHILD = Path(__file__).with_name("dbos_child.py")


class App:
    """The DBOS app of ``dbos_child.py`` on one system database, ledger and email file."""

    def __init__(self, target: Target, tmp_path: Path, mode: str) -> None:
        self.target, self.mode = target, mode
        self.sysdb = f"sqlite:///{tmp_path / 'dbos.db'}"
        self.emails = tmp_path / "emails.txt"

    def run(self, step: str) -> subprocess.CompletedProcess[str]:
        argv = [self.sysdb, str(self.emails), self.mode, step]
        return run_child(CHILD, *argv, env=self.target.env(), timeout=120)

    def killed(self, step: str) -> None:
        done = self.run(step)
        assert done.returncode == -signal.SIGKILL, done.stderr

    def outcome(self, step: str) -> dict[str, Any]:
        done = self.run(step)
        assert done.returncode == 0, done.stderr
        found: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
        return found

    def sent(self) -> int:
        return len(self.emails.read_text().splitlines()) if self.emails.exists() else 0


def resolve(target: Target, key: str, verdict: str) -> None:
    """A person settles the action with the real command."""
    command = Path(sys.executable).with_name("call4agents")
    done = subprocess.run(
        [str(command), "resolve", key[:12], verdict, "--by", "ann", "--url", target.url],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize(("mode", "emails"), [("bare", 2), ("once", 1)])
def test_a_step_killed_after_the_tool_acted_is_recovered_without_acting_twice(
    sqlite_target: Target, tmp_path: Path, mode: str, emails: int
) -> None:
    app = App(sqlite_target, tmp_path, mode)
    app.killed("after")
    assert app.sent() == 1
    assert app.outcome("recover") == {"result": "sent to bob@example.com"}
    assert app.sent() == emails


def in_doubt_seen(app: App, recovery: subprocess.Popen[str]) -> dict[str, Any]:
    """The first error the recovered step met, once DBOS is about to retry it."""
    errors = Path(str(app.emails) + ".errors")
    while not errors.exists() or not errors.read_text().strip():
        assert recovery.poll() is None, recovery.communicate()
        time.sleep(0.1)
    found: dict[str, Any] = json.loads(errors.read_text().splitlines()[0])
    return found


@pytest.mark.parametrize(
    ("kill", "verdict", "result"),
    [
        ("inside", "--happened", None),  # the email went out: recorded as sent, never resent
        ("before", "--did-not-happen", "sent to bob@example.com"),  # it did not: sent once now
    ],
)
def test_a_step_in_doubt_fails_naming_the_key_until_settled_then_finishes(
    sqlite_target: Target, tmp_path: Path, kill: str, verdict: str, result: str | None
) -> None:
    app = App(sqlite_target, tmp_path, "once")
    app.killed(kill)
    sent = app.sent()
    # The recovery runs in a process of its own while a person settles the action.
    argv = [sys.executable, str(CHILD), app.sysdb, str(app.emails), "once", "recover"]
    env = sqlite_target.env()
    with subprocess.Popen(
        argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as recovery:
        try:
            failed = in_doubt_seen(app, recovery)
            assert failed["error"] == "EffectInDoubt", failed
            assert failed["key"][:12] in failed["message"]
            assert app.sent() == sent  # the retries did not run the tool again
            resolve(sqlite_target, failed["key"], verdict)
            out, err = recovery.communicate(timeout=300)
        finally:
            if recovery.poll() is None:
                recovery.kill()
    assert recovery.returncode == 0, err
    assert json.loads(out.strip().splitlines()[-1]) == {"result": result}
    assert app.sent() == 1


def test_without_step_retries_the_workflow_ends_with_the_in_doubt_error_and_its_key(
    sqlite_target: Target, tmp_path: Path
) -> None:
    app = App(sqlite_target, tmp_path, "once-no-retries")
    app.killed("inside")
    failed = app.outcome("recover")  # the error came back through DBOS's serialization
    assert failed["error"] == "EffectInDoubt", failed
    [doubt] = sqlite_target.open().in_doubt()
    assert failed["key"] == doubt.key
    assert doubt.key[:12] in failed["message"]
    assert app.sent() == 1


def test_the_example_sends_once_and_a_second_process_sends_nothing(tmp_path: Path) -> None:
    example = EXAMPLES / "jobs" / "dbos_emails.py"
    out = run_example(example, tmp_path)
    assert "workflow: sent to bob@example.com" in out
    assert "step again: sent to bob@example.com" in out  # the recorded result
    assert "emails sent by this process: 1" in out
    again = run_example(example, tmp_path)  # the workflow and its action are recorded
    assert "emails sent by this process: 0" in again
