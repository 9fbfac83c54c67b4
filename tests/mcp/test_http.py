"""OnceOnly over streamable HTTP on loopback: real server processes (uvicorn), real sockets.

A proxy the test controls loses a response after the server has answered; two replica processes
share one PostgreSQL ledger and a retry lands on the other one. Emails are counted in an outbox
file the server processes append to, outside the ledger.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.types import CallToolResult, TextContent

from call4agents_mcp import KEY_META
from call4agents_mcp.quickstart import LossyProxy
from tests import forked
from tests.conftest import Target

SERVER = Path(__file__).with_name("http_server.py")
ARGS = {"to": "bob@example.com", "body": "Your refund is on its way"}

pytestmark = pytest.mark.slow  # each test starts real server processes


@contextmanager
def mcp_server(
    mode: str, outbox: Path, replica: str, env: dict[str, str], workdir: Path | None = None
) -> Iterator[str]:
    """Start tests/mcp/http_server.py; yields its URL; SIGKILLs it at the end.

    A process of its own, forked from the fork server that imported MCP once (tests/forked.py):
    a fresh interpreter spent seconds importing it, twice in the tests with two replicas."""
    child_env = dict(env, WORKDIR=str(workdir or ""))
    with forked.start(SERVER, [mode, str(outbox), replica], env=child_env) as server:
        line = server.first_line(timeout=120)
        assert line.startswith("PORT "), f"server {replica} did not start:\n{server.stderr}"
        yield f"http://127.0.0.1:{line.split()[1]}/mcp"


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1].split("/")[0])


def emails(outbox: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in outbox.read_text().splitlines()] if outbox.exists() else []


def text(result: CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


async def call(
    url: str,
    tool: str = "send_email",
    key: str | None = "k-1",
    args: dict[str, Any] | None = None,
    **client: Any,
) -> Any:
    meta = {KEY_META: key} if key else None
    async with Client(url, **client) as session:
        return await session.call_tool(tool, args or ARGS, meta=meta)


async def wait_for(path: Path) -> None:
    with anyio.fail_after(60):
        while not path.exists():
            await anyio.sleep(0.01)


def test_retry_with_same_key_runs_once(target: Target, tmp_path: Path) -> None:
    outbox = tmp_path / "outbox.jsonl"
    with mcp_server("once", outbox, "A", target.env()) as url:
        first = anyio.run(call, url)
        again = anyio.run(call, url)
    assert len(emails(outbox)) == 1
    assert text(again) == text(first) == "message #1 to bob@example.com (by A)"


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_lost_response_then_retried_runs_once(target: Target, tmp_path: Path, mode: str) -> None:
    outbox = tmp_path / "outbox.jsonl"
    with mcp_server("once", outbox, "A", target.env()) as url:
        proxy = LossyProxy(port_of(url))
        proxy.lose_next_response()
        with pytest.raises(Exception):  # the answer never arrives: the connection is cut
            anyio.run(lambda: call(proxy.url, mode=mode))
        retried = anyio.run(lambda: call(proxy.url, mode=mode))
        proxy.close()
    assert proxy.lost == 1
    assert len(emails(outbox)) == 1
    assert text(retried) == "message #1 to bob@example.com (by A)"
    assert (retried.meta or {})["io.call4agents/outcome"]["outcome"] == "replayed"


@pytest.mark.parametrize("grace", [True, False])
def test_client_timeout_then_retry(sqlite_target: Target, tmp_path: Path, grace: bool) -> None:
    outbox = tmp_path / "outbox.jsonl"
    env = sqlite_target.env() if grace else dict(sqlite_target.env(), NO_GRACE="1")

    async def main(url: str) -> Any:
        with pytest.raises(Exception):  # the client times out, cancels the request, gives up
            await call(url, "send_email_slowly", read_timeout_seconds=0.5)
        await wait_for(tmp_path / "cancelled-A")  # the server has applied the cancel
        (tmp_path / "release").touch()
        return await call(url, "send_email_slowly")

    with mcp_server("once", outbox, "A", env, tmp_path) as url:
        retried = anyio.run(main, url)
    if grace:  # the cancelled call went on, sent once, and the retry got its result
        assert len(emails(outbox)) == 1
        assert text(retried) == "message #1 to bob@example.com (by A)"
    else:  # stopped half way: honest, but a person must now settle it
        assert len(emails(outbox)) == 0
        assert retried.meta["io.call4agents/outcome"]["outcome"] == "in_doubt"


def test_lost_response_without_call4agents_sends_twice(
    sqlite_target: Target, tmp_path: Path
) -> None:
    outbox = tmp_path / "outbox.jsonl"
    with mcp_server("plain", outbox, "A", sqlite_target.env()) as url:
        proxy = LossyProxy(port_of(url))
        proxy.lose_next_response()
        with pytest.raises(Exception):
            anyio.run(call, proxy.url)
        anyio.run(call, proxy.url)
        proxy.close()
    assert len(emails(outbox)) == 2  # what OnceOnly prevents


def test_without_key_a_legacy_session_retry_runs_once(target: Target, tmp_path: Path) -> None:
    outbox = tmp_path / "outbox.jsonl"

    async def same_session(url: str) -> list[str]:
        async with Client(url, mode="legacy") as session:
            return [text(await session.call_tool("send_email", ARGS)) for _ in range(2)]

    with mcp_server("once", outbox, "A", target.env()) as url:
        results = anyio.run(same_session, url)
        anyio.run(same_session, url)  # a new session is a new caller: no key, so it runs
    assert results[0] == results[1]
    assert len(emails(outbox)) == 2
    ledger = target.open()
    assert all(r.run_id.startswith("mcp:session:") for r in ledger.effects())


def test_two_replicas_on_one_postgres_ledger(pg_target: Target, tmp_path: Path) -> None:
    outbox = tmp_path / "outbox.jsonl"
    env = pg_target.env()
    with mcp_server("once", outbox, "A", env) as a, mcp_server("once", outbox, "B", env) as b:
        first = anyio.run(call, a)
        again = anyio.run(call, b)  # the retry lands on the other replica
    assert [e["replica"] for e in emails(outbox)] == ["A"]
    assert text(again) == text(first) == "message #1 to bob@example.com (by A)"


def test_two_replicas_duplicate_while_the_first_runs(pg_target: Target, tmp_path: Path) -> None:
    outbox, env = tmp_path / "outbox.jsonl", pg_target.env()
    results: dict[str, str] = {}

    async def main(a: str, b: str) -> None:
        async def call_on(name: str, url: str) -> None:
            results[name] = text(await call(url, "send_email_slowly"))

        async with anyio.create_task_group() as tg:
            tg.start_soon(call_on, "A", a)
            await wait_for(tmp_path / "started-A")  # A holds the action and is sending
            tg.start_soon(call_on, "B", b)
            await wait_for(tmp_path / "arrived-B")  # B has the duplicate in hand
            (tmp_path / "release").touch()

    with (
        mcp_server("once", outbox, "A", env, tmp_path) as a,
        mcp_server("once", outbox, "B", env, tmp_path) as b,
    ):
        anyio.run(main, a, b)
    assert [e["replica"] for e in emails(outbox)] == ["A"]
    assert not (tmp_path / "started-B").exists()
    assert results == dict.fromkeys("AB", "message #1 to bob@example.com (by A)")
