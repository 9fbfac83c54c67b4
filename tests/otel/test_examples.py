"""The observability example runs offline and prints what the README says."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).parents[2] / "examples" / "observability"


def test_traces_and_replay(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "traces_and_replay.py")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "span execute_tool send_email: ok (under invoke_agent)" in out
    assert "span execute_tool send_email: deduped (under invoke_agent)" in out
    assert "span execute_tool wire_money: timeout (under invoke_agent)" in out
    assert "Irreversible executions:  1 (ticket-42: 1)" in out
    assert "replayed: {'id': 'msg-1'}" in out
    assert "replayed: a call the incident never made was refused" in out
    assert "real emails sent during the replay: 0" in out
