"""Every Pydantic AI example runs offline, in a fresh folder, and prints what it claims."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.conftest import run_example as shared_run_example

EXAMPLES = Path(__file__).parents[2] / "examples" / "pydantic_ai"


def run_example(name: str, cwd: Path) -> str:
    return shared_run_example(EXAMPLES / name, cwd)


def test_send_email(tmp_path: Path) -> None:
    out = run_example("send_email.py", tmp_path)
    assert "Done: sent to bob@example.com" in out
    assert "resumed: Done: sent to bob@example.com" in out
    assert "emails sent by this process: 1" in out
    again = run_example("send_email.py", tmp_path)  # the conversation already emailed Bob
    assert "emails sent by this process: 0" in again


def test_approvals(tmp_path: Path) -> None:
    out = run_example("approvals.py", tmp_path).splitlines()
    assert out[0].startswith("needs approval: refund {'amount': 120, 'order': 'A-17'} (ticket apr_")
    assert out[1:4] == ["Done: refunded 120 EUR on A-17"] * 2 + ["Done: refunded 100 EUR on A-17"]
    assert out[4] == "edited history: asked again for {'order': 'A-17', 'amount': 5000}"
    assert out[5] == "refunds made: [('A-17', 120), ('A-17', 100)]"
    assert out[6].endswith(": spent by ann@shop.example")


def test_run_controls(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = run_example("run_controls.py", tmp_path)
    assert "budget: stopped by step_limit (5 model requests) after 5 emails" in out
    assert "the model was told 2 times: Note from the run's budget: 80% of a limit" in out
    assert "spent: 5 requests, 5000 tokens in, cost 0.030" in out
    assert "escalated: refunds over 100 need a person" in out
    assert "done: [('send_email', 'bob@example.com')]" in out
    assert "remains: ['refund 500 on A-17 once approved']" in out
    assert "undo: undone; recalled 1 email(s)" in out

    found = re.search(r"`(\S+call4agents show ticket-\w+)` prints it all", out)
    assert found is not None
    # As printed, in the user's shell, from the folder the example ran in.
    done = subprocess.run(found.group(1), shell=True, cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    shown = done.stdout
    assert "was escalated: refunds over 100 need a person" in shown
    assert "Blocking fact: the refund is 500" in shown
    again = run_example("run_controls.py", tmp_path)  # fresh conversation ids: same story
    assert "budget: stopped by step_limit (5 model requests) after 5 emails" in again


@pytest.mark.parametrize("name", sorted(p.name for p in EXAMPLES.glob("*.py")))
def test_every_example_is_covered(name: str) -> None:
    assert f'"{name}"' in Path(__file__).read_text()
