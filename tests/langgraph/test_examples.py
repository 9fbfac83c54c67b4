"""Every LangGraph example runs offline, in a fresh folder, and prints what it claims."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).parents[2] / "examples" / "langgraph"


def run_example(name: str, cwd: Path) -> list[str]:
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / name)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_send_email(tmp_path: Path) -> None:
    out = run_example("send_email.py", tmp_path)
    assert out[0].startswith("tool said: sent to bob@example.com (idempotency key c4a-")
    assert out[1].startswith("replayed: sent to bob@example.com")
    assert out[1].endswith("(deduped)")
    assert out[2] == "emails sent by this process: 1"
    again = run_example("send_email.py", tmp_path)  # the thread already emailed Bob
    assert again[2] == "emails sent by this process: 0"


def test_approvals(tmp_path: Path) -> None:
    out = run_example("approvals.py", tmp_path)
    assert out[0].startswith("paused: refund {'amount': 120, 'order': 'A-17'} ticket apr_")
    assert out[1:4] == [
        "refunds so far: []",
        "tool said: refunded 100 EUR on A-17",
        "refunds made: [('A-17', 100)]",
    ]
    assert out[4:] == [
        "ticket {'amount': 120, 'order': 'A-17'}: pending",
        "ticket {'amount': 100, 'order': 'A-17'}: spent by ann",
    ]


def test_custom_node(tmp_path: Path) -> None:
    assert run_example("custom_node.py", tmp_path) == [
        "asked: charged 42 (receipt-1); email the receipt?",
        "receipt: receipt-1 | emailed receipt-1",
        "cards charged: [42]; receipts emailed: ['receipt-1']",
    ]


def test_checkpointer(tmp_path: Path) -> None:
    out = run_example("checkpointer.py", tmp_path)
    assert out[:5] == [
        "step -1 next=('__start__',): -",
        "step  0 next=('model',): -",
        "step  1 next=('tools',): -",
        "step  2 next=('model',): send_email (succeeded)",
        "step  3 next=(): -",
    ]
    assert out[5] == "after delete_thread: 0 ledger records, 0 checkpoints"


def test_run_controls(tmp_path: Path) -> None:
    out = run_example("run_controls.py", tmp_path)
    assert out == [
        "budget: ended by its step_limit (4 model requests); the model got 4",
        "the model was told to wrap up in 3 of them",
        "tokens 3600 in, 400 out; cost 0.0168",
        "recorded ending: step_limit",
        "escalated: charges over 100 need a person",
        "already done: ['ann 40', 'bob 60']",
        "remains: ['charge cy 500 once a person approved it']",
        "undo: undone; refunds ['ch_bob_60', 'ch_ann_40']",
        "undo again: ['already_undone', 'already_undone']; refunds ['ch_bob_60', 'ch_ann_40']",
    ]


def test_quickstart_rows(tmp_path: Path) -> None:
    from call4agents_langgraph.quickstart import scenario

    rows = scenario(tmp_path, f"sqlite:///{tmp_path / 'ledger.db'}")
    assert [(label, emails) for label, emails, _ in rows] == [
        ("LangGraph, killed after sending, without Call4Agents", 2),
        ("LangGraph, killed after sending, with Call4Agents", 1),
    ]


def test_the_readme_snippet_is_the_send_email_example() -> None:
    readme = (Path(__file__).parents[2] / "packages" / "langgraph" / "README.md").read_text()
    source = (EXAMPLES / "send_email.py").read_text()
    code = source[source.index("from __future__") :]  # the file without its docstring
    assert f"```python\n{code}```" in readme


@pytest.mark.parametrize("name", sorted(p.name for p in EXAMPLES.glob("*.py")))
def test_every_example_is_covered(name: str) -> None:
    assert f'"{name}"' in Path(__file__).read_text()
