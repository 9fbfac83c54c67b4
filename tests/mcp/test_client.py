"""The client side: stable keys, the call_tool helper, and the framework hooks that send them."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult, TextContent

import call4agents as c4a
from call4agents_mcp import KEY_META, OnceOnly, call_tool, idempotency_key, process_tool_call
from call4agents_mcp import tool_meta_resolver as agents_resolver
from tests.conftest import NEEDS_PY311, OLD_PYTHON, Target

SERVER = Path(__file__).with_name("http_server.py")


def test_key_is_stable_and_canonical() -> None:
    a = idempotency_key("send_email", {"to": "bob", "n": 1}, run_id="ticket-1")
    b = idempotency_key("send_email", {"n": 1, "to": "bob"}, run_id="ticket-1")
    assert a == b
    assert a.startswith("c4a-")
    assert len(a) == 44
    assert a != idempotency_key("send_email", {"to": "bob", "n": 1.0}, run_id="ticket-1")
    assert a != idempotency_key("send_email", {"to": "bob", "n": 1}, run_id="ticket-2")
    assert a != idempotency_key("send_sms", {"to": "bob", "n": 1}, run_id="ticket-1")


def test_key_comes_from_the_enclosing_run() -> None:
    with c4a.run("ticket-1"):
        inside = idempotency_key("send_email", {"to": "bob"})
    assert inside == idempotency_key("send_email", {"to": "bob"}, run_id="ticket-1")


def test_key_without_a_run_is_refused() -> None:
    with pytest.raises(c4a.ConfigurationError, match="no run id"):
        idempotency_key("send_email", {"to": "bob"})


def test_key_of_unstable_arguments_is_refused() -> None:
    with pytest.raises(c4a.UnstableArguments):
        idempotency_key("charge", {"amount": math.nan}, run_id="r")


def first_text(result: CallToolResult) -> Any:
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


def test_call_tool_helper_keeps_caller_meta_and_explicit_keys() -> None:
    seen: list[Any] = []
    app = MCPServer("spy")

    async def spy(ctx: Any, call_next: Any) -> Any:
        if ctx.method == "tools/call":
            seen.append(dict(ctx.params.get("_meta") or {}))
        return await call_next(ctx)

    app.middleware.append(spy)

    @app.tool()
    def echo(word: str) -> str:
        return word

    async def main() -> None:
        async with Client(app) as client:
            await call_tool(client, "echo", {"word": "a"}, run_id="r", meta={"trace": "t1"})
            await call_tool(client, "echo", {"word": "a"}, key="mine")

    anyio.run(main)
    assert seen[0]["trace"] == "t1"
    assert seen[0][KEY_META] == idempotency_key("echo", {"word": "a"}, run_id="r")
    assert seen[1][KEY_META] == "mine"


# -- Pydantic AI's MCPToolset hook --------------------------------------------------------------


@pytest.mark.skipif(OLD_PYTHON, reason=NEEDS_PY311)
def test_pydantic_ai_hook_sends_a_key_per_conversation(ledger: c4a.Ledger, tmp_path: Path) -> None:
    from pydantic_ai import RunContext
    from pydantic_ai.models.test import TestModel
    from pydantic_ai.usage import RunUsage

    sent: list[str] = []
    app = MCPServer("mail", middleware=[OnceOnly()])

    @app.tool()
    def send_email(to: str) -> str:
        sent.append(to)
        return f"sent #{len(sent)}"

    hook = process_tool_call()

    async def conversation(conversation_id: str) -> Any:
        ctx = RunContext(
            deps=None, model=TestModel(), usage=RunUsage(), conversation_id=conversation_id
        )
        async with Client(app) as client:
            # MCPToolset's CallToolFunc: (name, args, *, metadata) -> result (fastmcp is not
            # installed here, so the SDK client stands in for the toolset's transport).
            async def call(name: str, args: dict[str, Any], *, metadata: Any = None) -> Any:
                return await client.call_tool(name, args, meta=metadata)

            return await hook(ctx, call, "send_email", {"to": "bob"})

    first = anyio.run(conversation, "conv-1")
    resumed = anyio.run(conversation, "conv-1")
    other = anyio.run(conversation, "conv-2")
    assert sent == ["bob", "bob"]  # once per conversation
    assert first_text(first) == first_text(resumed) == "sent #1"
    assert first_text(other) == "sent #2"


# -- the Agents SDK's MCP servers ---------------------------------------------------------------


@pytest.mark.slow
def test_agents_sdk_resumed_agent_sends_once(sqlite_target: Target, tmp_path: Path) -> None:
    from agents import Agent, Runner, set_tracing_disabled
    from agents.mcp import MCPServerStreamableHttp
    from agents.testing import ScriptedModel, assistant_message, function_call

    set_tracing_disabled(True)
    outbox = tmp_path / "outbox.jsonl"
    argv = [sys.executable, str(SERVER), "once", str(outbox), "A"]
    env = dict(sqlite_target.env(), WORKDIR="")
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, text=True)

    async def agent_run(port: int, call_id: str) -> str:
        params = {"url": f"http://127.0.0.1:{port}/mcp"}
        async with MCPServerStreamableHttp(params, tool_meta_resolver=agents_resolver()) as server:
            model = ScriptedModel(
                [
                    [function_call("send_email", {"to": "bob", "body": "hi"}, call_id=call_id)],
                    [assistant_message("done")],
                ]
            )
            agent = Agent("mailer", model=model, mcp_servers=[server])
            async with c4a.run("ticket-77"):
                result = await Runner.run(agent, "Email Bob")
            return str(result.final_output)

    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline().split()[1])
        # The same agent run twice, as after a crash before its state was saved: the model's
        # call id differs, the (run, tool, arguments) key does not.
        assert anyio.run(agent_run, port, "call-1") == "done"
        assert anyio.run(agent_run, port, "call-2") == "done"
    finally:
        proc.kill()
        proc.wait()
    lines = [json.loads(line) for line in outbox.read_text().splitlines()]
    assert [line["to"] for line in lines] == ["bob"]
