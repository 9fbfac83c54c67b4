"""Every plain-Python example runs, offline, and says what the README says it does."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import run_example as shared_run_example

EXAMPLES = Path(__file__).parents[1] / "examples" / "plain_python"


def run_example(name: str, cwd: Path) -> str:
    return shared_run_example(EXAMPLES / name, cwd)


def test_send_email(tmp_path: Path) -> None:
    out = run_example("send_email.py", tmp_path)
    assert "second call: msg-1 (recorded result, nothing sent)" in out
    assert "emails sent by this process: 1" in out
    assert "notify_billing again: refused, TimeoutError: the billing API did not answer" in out
    assert "resolved: it did not happen" in out
    again = run_example("send_email.py", tmp_path)  # a second process: the run is done already
    assert "emails sent by this process: 0" in again
    assert (tmp_path / ".c4a" / "ledger.db").exists()


def test_approvals(tmp_path: Path) -> None:
    out = run_example("approvals.py", tmp_path)
    assert "'card': '***'" in out
    # Any part of the card as written; a bare "4242" also turns up, by chance, in a ticket's id.
    assert "4242-" not in out
    assert "paid 10 to alice (a repeat: recorded result)" in out
    assert "denied: denied by ann: not a customer" in out
    assert "payments made: [(10, 'alice')]" in out


def test_idempotency_keys(tmp_path: Path) -> None:
    out = run_example("idempotency_keys.py", tmp_path)
    assert "retried with the same key: ch_1; charges at the provider: 1" in out
    assert "the reconciler found it: ch_2; charges: 2" in out


@pytest.mark.parametrize("name", sorted(p.name for p in EXAMPLES.glob("*.py")))
def test_every_example_is_covered(name: str) -> None:
    tests = Path(__file__).parent
    assert any(f'"{name}"' in t.read_text() for t in tests.rglob("test_*.py")), name
