"""Inside a real MCP server, our span nests under the SDK's own tools/call span."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import Target, run_child

CHILD = Path(__file__).with_name("mcp_child.py")
REPO = Path(__file__).parents[2]


def test_span_nests_under_mcp_server_span(target: Target) -> None:
    done = run_child(CHILD, env=dict(target.env(), PYTHONPATH=str(REPO)))
    assert done.returncode == 0, done.stderr
    spans = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    by_id = {s["span_id"]: s for s in spans}
    [ours] = [s for s in spans if s["scope"] == "call4agents"]
    assert ours["name"] == "execute_tool send_email"
    assert ours["attributes"]["call4agents.outcome"] == "ok"
    server = by_id[ours["parent_id"]]
    assert server["scope"] == "mcp-python-sdk"
    assert server["name"] == "tools/call send_email"
    assert server["attributes"]["gen_ai.operation.name"] == "execute_tool"
    assert server["trace_id"] == ours["trace_id"]
