"""Pydantic AI's ``DBOSAgent`` with the Pydantic AI integration's ``OnceOnly`` capability: the
process killed after the tool sent its email (the tool runs in workflow code, so DBOS has no
record of it), the workflow recovered by DBOS in a fresh process, the emails counted in a file."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from tests.conftest import Target, run_child

pytestmark = pytest.mark.slow  # worker processes killed and recovered: seconds a test
CHILD = Path(__file__).with_name("dbos_agent_child.py")


@pytest.mark.parametrize(
    ("mode", "emails"),
    [
        ("bare", 2),  # recovery replays the model's answers and runs the tool again
        # Without a conversation_id, DBOSAgent's run gets a fresh one in each process, so the
        # resumed run is not matched to what ran (the integration warns); the docs say so.
        ("once", 2),
        ("once-given", 1),  # conversation_id=<the workflow id>: the tool acts once
    ],
)
def test_a_durable_agent_recovered_after_its_tool_acted(
    sqlite_target: Target, tmp_path: Path, mode: str, emails: int
) -> None:
    sysdb, sent = f"sqlite:///{tmp_path / 'dbos.db'}", tmp_path / "emails.txt"
    argv = [sysdb, str(sent), mode]
    env = sqlite_target.env()
    killed = run_child(CHILD, *argv, "kill", env=env, timeout=120)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert len(sent.read_text().splitlines()) == 1
    recovered = run_child(CHILD, *argv, "recover", env=env, timeout=120)
    assert recovered.returncode == 0, recovered.stderr
    output = json.loads(recovered.stdout.strip().splitlines()[-1])
    assert output == {"output": "Done: sent to bob@example.com"}
    assert len(sent.read_text().splitlines()) == emails
