"""MCP tool calls made through the Agents SDK carry the call's stable idempotency key in _meta."""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path
from typing import Any

from agents import Agent, Runner
from agents.mcp import MCPServerStdio

from call4agents_mcp import KEY_META, idempotency_key
from call4agents_openai_agents import OnceOnly
from tests.openai_agents.support import assistant_message, call, outputs, script

SERVER = Path(__file__).with_name("mcp_server.py")


async def test_the_key_is_stable_within_a_run_and_differs_across_runs(tmp_path: Path) -> None:
    log = tmp_path / "calls.jsonl"
    once = OnceOnly()
    params: Any = {"command": sys.executable, "args": [str(SERVER), str(log)]}
    async with MCPServerStdio(params=params, tool_meta_resolver=once.mcp_meta) as server:
        seen = []
        for run_id, call_id in (("ticket-7", "c1"), ("ticket-7", "c2"), ("ticket-8", "c3")):
            agent = once.wrap(
                Agent(
                    name="mailer",
                    model=script(
                        [call("send_email", call_id, to="bob", body="hi")],
                        [assistant_message("done")],
                    ),
                    mcp_servers=[server],
                )
            )
            result = await Runner.run(agent, "go", context={"call4agents_run_id": run_id})
            seen.extend(outputs(result))
    keys = [json.loads(line)["key"] for line in log.read_text().splitlines()]
    arguments = {"to": "bob", "body": "hi"}
    assert keys == [
        idempotency_key("send_email", arguments, run_id="ticket-7"),
        idempotency_key("send_email", arguments, run_id="ticket-7"),
        idempotency_key("send_email", arguments, run_id="ticket-8"),
    ]
    assert KEY_META == "io.call4agents/idempotency-key"
    # The server answered the repeat in ticket-7 with the first result: one email per run.
    assert [ast.literal_eval(output)["text"] for output in seen] == [
        "email 1 sent to bob",
        "email 1 sent to bob",
        "email 2 sent to bob",
    ]
