"""The observability example runs offline and prints what the README says."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import run_example

EXAMPLES = Path(__file__).parents[2] / "examples" / "observability"


def test_traces_and_replay(tmp_path: Path) -> None:
    out = run_example(EXAMPLES / "traces_and_replay.py", tmp_path)
    assert "span execute_tool send_email: ok (under invoke_agent)" in out
    assert "span execute_tool send_email: deduped (under invoke_agent)" in out
    assert "span execute_tool wire_money: timeout (under invoke_agent)" in out
    assert "Irreversible executions:  1 (ticket-42: 1)" in out
    assert "replayed: {'id': 'msg-1'}" in out
    assert "replayed: a call the incident never made was refused" in out
    assert "real emails sent during the replay: 0" in out
