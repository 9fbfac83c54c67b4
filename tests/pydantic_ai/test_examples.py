"""Every Pydantic AI example runs offline, in a fresh folder, and prints what it claims."""

from __future__ import annotations

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


@pytest.mark.parametrize("name", sorted(p.name for p in EXAMPLES.glob("*.py")))
def test_every_example_is_covered(name: str) -> None:
    assert f'"{name}"' in Path(__file__).read_text()
