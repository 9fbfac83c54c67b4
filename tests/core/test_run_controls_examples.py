"""The run-controls example runs offline and says what the README says it does."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.conftest import run_example

EXAMPLE = Path(__file__).parents[2] / "examples" / "plain_python" / "run_controls.py"


def test_run_controls_example(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = run_example(EXAMPLE, tmp_path)
    assert "charged: [12, 30]" in out
    assert "undo run_controls.post_to_slack: no_undo (no undo registered" in out
    assert out.count("undo run_controls.charge: undone (reversed)") == 2
    assert "run is partly_undone; charges left: 0" in out
    assert "second undo: ['no_undo', 'already_undone', 'already_undone']" in out
    assert "found T-1 instead of opening another; tickets: 1" in out
    assert "escalated: refunds over 100 need a person" in out
    assert "done: [('run_controls.charge', {'charge_id': 'ch_1'})]" in out
    assert "soft limit reached after 2 messages" in out
    assert "stopped before message 4: step_limit (3 calls of run_controls.send_sms)" in out
    assert "after the resume: still refused, the count is in the ledger" in out
    assert re.search(r"run updates-\w+ ended: step_limit", out)

    found = re.search(r"see it with: (\S+call4agents show refund-\w+)$", out, re.MULTILINE)
    assert found is not None
    # As printed, in the user's shell, from the folder the example ran in.
    done = subprocess.run(found.group(1), shell=True, cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    shown = done.stdout
    assert "was escalated: refunds over 100 need a person" in shown
    assert "  - refund 500 to carol once approved" in shown
