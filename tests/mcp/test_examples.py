"""The examples in examples/mcp run as written, each in a fresh directory, and say what happened."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from mcp import Client, StdioServerParameters
from mcp.types import CallToolResult

from tests.conftest import Target

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "mcp"


def run_example(name: str, *args: str, target: Target, cwd: Path) -> str:
    env = dict(target.env(), CALL4AGENTS_URL=target.url)
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_in_memory_example(sqlite_target: Target, tmp_path: Path) -> None:
    out = run_example("once_only_server.py", target=sqlite_target, cwd=tmp_path)
    assert "first call: message #1 to bob@example.com" in out
    assert "retry:      message #1 to bob@example.com (replayed)" in out
    assert "emails sent: 1" in out


def test_run_controls_example(sqlite_target: Target, tmp_path: Path) -> None:
    out = run_example("run_controls.py", target=sqlite_target, cwd=tmp_path)
    assert out.splitlines() == [
        "charged: ch_alice_20",
        "charged: ch_bob_20",
        "charged: ch_alice_20",
        "escalated: credits over 100 need a team lead",
        "already done: [{'charge_id': 'ch_alice_20'}, {'charge_id': 'ch_bob_20'}]",
        "stopped: step_limit (3 tool calls)",
        "undo: undone, refunded ['ch_bob_20', 'ch_alice_20']",
    ]


@pytest.mark.slow
def test_http_server_and_client_examples(sqlite_target: Target, tmp_path: Path) -> None:
    env = dict(sqlite_target.env(), CALL4AGENTS_URL=sqlite_target.url)
    server = subprocess.Popen(
        [sys.executable, str(EXAMPLES / "server.py")],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        line = server.stdout.readline()
        assert line.startswith("listening on http://127.0.0.1:")
        url = line.split()[-1]
        out = run_example("client.py", url, target=sqlite_target, cwd=tmp_path)
    finally:
        server.kill()
        server.wait()
    first, retry, sent = out.splitlines()
    assert first.startswith("first call: message #1 to bob@example.com (idempotency key c4a-")
    assert retry == first.replace("first call:", "retry:     ") + " (replayed)"
    assert sent == "emails sent: 1"


def test_stdio_server_example_without_a_key(sqlite_target: Target, tmp_path: Path) -> None:
    """The Inspector's case: one client over stdio, no key and no session id. The call runs
    outside the ledger (with a warning) and the tool, which reads c4a.current(), still works."""
    env = dict(sqlite_target.env(), CALL4AGENTS_URL=sqlite_target.url)
    params = StdioServerParameters(
        command=sys.executable, args=[str(EXAMPLES / "server.py"), "--stdio"], env=env, cwd=tmp_path
    )

    async def main() -> list[CallToolResult]:
        async with Client(params) as client:
            args = {"to": "bob@example.com", "body": "hi"}
            return [
                await client.call_tool("send_email", args),
                await client.call_tool("send_email", args),
                await client.call_tool("sent_count", {}),
            ]

    first, second, count = anyio.run(main)
    assert not first.is_error, first
    assert not second.is_error, second
    assert first.structured_content is not None
    assert str(first.structured_content["result"]).startswith("message #1 to bob@example.com")
    assert second.structured_content is not None
    assert str(second.structured_content["result"]).startswith("message #2 to bob@example.com")
    assert count.structured_content == {"result": 2}  # both ran: nothing could tell them apart
