"""Pydantic AI's MCPToolset with both integrations: OnceOnly on the agent and on the MCP server.

A real MCP server process (tests/mcp/http_server.py: MCPServer + call4agents_mcp.OnceOnly over
streamable HTTP, its ledger a SQLite file) appends each email to an outbox file. The agent talks to
it through ``pydantic_ai.mcp.MCPToolset`` with ``call4agents_mcp.process_tool_call()``, which sends
a stable key in ``_meta``. A resume re-runs the saved history that ends with the model's tool call.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from pydantic_ai import Agent
from pydantic_ai.mcp import MCPToolset
from pydantic_ai.messages import ModelMessage

import call4agents as c4a
from call4agents_mcp import KEY_META, idempotency_key, process_tool_call
from call4agents_pydantic_ai import OnceOnly
from tests.conftest import Target
from tests.pydantic_ai.scripted import returns_in, scripted
from tests.pydantic_ai.test_once_only import BOB, frontier

SERVER = Path(__file__).parents[1] / "mcp" / "http_server.py"
FIRST = "message #1 to bob@example.com (by A)"

pytestmark = pytest.mark.slow  # a real server process per test


@contextmanager
def mail_server(tmp_path: Path, mode: str = "once") -> Iterator[str]:
    """The MCP server as a child process, its ledger in tmp_path; yields its URL, then kills it."""
    env = dict(Target("sqlite", f"sqlite:///{tmp_path / 'server.db'}").env(), WORKDIR="")
    argv = [sys.executable, str(SERVER), mode, str(tmp_path / "outbox.jsonl"), "A"]
    with (tmp_path / "server.log").open("w") as log:  # the child keeps its own copy
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=log, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("PORT "), (tmp_path / "server.log").read_text()
        yield f"http://127.0.0.1:{line.split()[1]}/mcp"
    finally:
        proc.kill()  # our own child, by its handle
        proc.communicate()  # reaps it and closes the pipe


def emails(tmp_path: Path) -> list[dict[str, Any]]:
    outbox = tmp_path / "outbox.jsonl"
    return [json.loads(line) for line in outbox.read_text().splitlines()] if outbox.exists() else []


def mail_agent(url: str, ledger: c4a.Ledger | None, *, key: bool) -> Agent[None, str]:
    toolset = MCPToolset(url, process_tool_call=process_tool_call() if key else None)
    capabilities = [OnceOnly(ledger=ledger)] if ledger is not None else []
    return Agent(
        scripted([("send_email", BOB, "c1")]), toolsets=[toolset], capabilities=capabilities
    )


async def first_run_and_resume(agent: Agent[None, str]) -> tuple[list[Any], list[Any]]:
    """Run the conversation, then resume it from the history saved right after the tool call."""
    first: list[ModelMessage] = (await agent.run("Tell Bob", conversation_id="t-1")).all_messages()
    saved = frontier(first)
    resumed = (await agent.run(message_history=saved)).all_messages()[len(saved) :]
    return returns_in(first), returns_in(resumed)


def test_resumed_agent_with_both_integrations_sends_once(target: Target, tmp_path: Path) -> None:
    client_ledger = target.open()

    async def main(url: str) -> tuple[list[Any], list[Any], Any]:
        first, resumed = await first_run_and_resume(mail_agent(url, client_ledger, key=True))
        key = idempotency_key("send_email", BOB, run_id="t-1")  # the key the agent sent
        async with MCPToolset(url) as toolset:  # retried from another MCP client
            retried = await toolset.direct_call_tool("send_email", BOB, metadata={KEY_META: key})
        return first, resumed, retried

    with mail_server(tmp_path) as url:
        first, resumed, retried = anyio.run(main, url)
    assert len(emails(tmp_path)) == 1
    assert first == resumed == [["send_email", FIRST, "success"]]
    assert retried == FIRST  # the server answered the retried key from its own ledger
    [record] = client_ledger.effects("t-1")  # the resume was answered on the client side
    assert (record.tool, record.state, record.attempt, record.result) == (
        "send_email",
        "succeeded",
        1,
        FIRST,
    )
    server_ledger = c4a.Ledger(f"sqlite:///{tmp_path / 'server.db'}")
    [served] = server_ledger.effects()  # one action: the agent's key and the retried one agree
    server_ledger.close()
    assert (served.run_id, served.state, served.attempt) == ("mcp:anonymous", "succeeded", 1)


@pytest.mark.parametrize(
    ("server", "capability", "key", "sent"),
    [
        ("once", False, True, 1),  # the server alone: the resume sends the same key
        # No key, and a FastMCP 4 client has no session id: an anonymous caller cannot be told
        # apart from another, so the server does not merge its calls (anonymous_window=False).
        ("once", False, False, 2),
        ("plain", True, False, 1),  # the capability alone: the resume never reaches the server
        ("plain", False, False, 2),  # neither: what Call4Agents prevents
    ],
    ids=["server-only", "server-anonymous-no-key", "capability-only", "neither"],
)
def test_each_layer_alone(
    sqlite_target: Target, tmp_path: Path, server: str, capability: bool, key: bool, sent: int
) -> None:
    ledger = sqlite_target.open() if capability else None
    with mail_server(tmp_path, server) as url:
        first, resumed = anyio.run(first_run_and_resume, mail_agent(url, ledger, key=key))
    assert len(emails(tmp_path)) == sent
    assert first == [["send_email", FIRST, "success"]]
    assert resumed == [["send_email", f"message #{sent} to bob@example.com (by A)", "success"]]
