"""Each example in examples/openai_agents runs offline in a fresh interpreter and says so."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "openai_agents"

EXPECTED = {
    "send_email.py": [
        "delivery 1: tool said 'email sent to bob@example.com",
        "emails actually sent: 1",
    ],
    "approvals.py": [
        "needs approval; ticket apr_",
        "refunds actually made: 1; ticket spent by ann",
    ],
    "crash_resume.py": [
        "without Call4Agents: 2 email(s)",
        "with Call4Agents: 1 email(s), the resumed run got the recorded result",
    ],
    "run_controls.py": [
        "budget: stopped by its step_limit (5 model requests) after 5 requests",
        "the model was told to wrap up in 1 request(s)",
        "tokens 4500 in, 500 out; cost 0.0210",
        "recorded ending: step_limit",
        "escalated: charges over 100 need a person",
        "  done: charge {'amount': 40, 'customer': 'ann'} ids {'charge_id': 'ch_ann_40'}",
        "  done: charge {'amount': 60, 'customer': 'bob'} ids {'charge_id': 'ch_bob_60'}",
        "  handed over: charge {'amount': 500, 'customer': 'cat'}",
        "undo: undone; refunded ['ch_bob_60', 'ch_ann_40']",
    ],
}


def test_every_example_is_checked() -> None:
    assert sorted(p.name for p in EXAMPLES.glob("*.py")) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_example_runs(name: str, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CALL4AGENTS_")}
    env["OPENAI_AGENTS_DISABLE_TRACING"] = "1"
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / name)],
        cwd=tmp_path,  # the default ledger, .c4a/ledger.db, lands here
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    for line in EXPECTED[name]:
        assert line in done.stdout, done.stdout
