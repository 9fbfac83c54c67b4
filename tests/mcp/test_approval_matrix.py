"""The approval matrix for MCP servers: two server processes on one ledger, SQLite and PostgreSQL.

An MCP client has no approval channel of its own: the server answers a call that needs a yes with
an error result carrying the ledger's ticket, and a person decides in the ledger. What a client
can edit is its retry: the same idempotency key, other arguments (bob's email now goes to
mallory), before or after the person's yes. The edited retry is sent once, again, and to both
replicas at once: mallory is never emailed, and the yes given for bob still covers bob alone.
A later no in the ledger or on the command line wins over a yes not yet spent. The first test
shows a server without Call4Agents sending the edited retry.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from call4agents.facade.cli import main as cli
from tests.conftest import Target
from tests.mcp.test_http import call, emails, mcp_server

pytestmark = pytest.mark.slow  # each test starts two server processes

BOB = {"to": "bob@example.com", "body": "Your refund is on its way"}
MALLORY = {**BOB, "to": "mallory@example.com"}


@contextmanager
def replicas(mode: str, target: Target, folder: Path) -> Iterator[tuple[str, str]]:
    env = dict(target.env(), APPROVAL="1")
    outbox = folder / "outbox.jsonl"
    with ExitStack() as stack:
        a = stack.enter_context(mcp_server(mode, outbox, "A", env))
        b = stack.enter_context(mcp_server(mode, outbox, "B", env))
        yield a, b


def send(urls: tuple[str, ...], args: dict[str, Any]) -> list[Any]:
    """The same keyed call sent to each URL at once; the results in order."""
    results: list[Any] = [None] * len(urls)

    async def main() -> None:
        async def one(i: int, url: str) -> None:
            results[i] = await call(url, key="k-1", args=args)

        async with anyio.create_task_group() as tg:
            for i, url in enumerate(urls):
                tg.start_soon(one, i, url)

    anyio.run(main)
    return results


def ticket_of(result: Any) -> str:
    assert result.is_error, result
    info = result.meta["io.call4agents/outcome"]
    assert info["outcome"] == "approval_required", info
    return str(info["approval"]["ticket"])


def sent_to(folder: Path) -> list[str]:
    return [e["to"] for e in emails(folder / "outbox.jsonl")]


def test_a_server_without_call4agents_sends_the_edited_retry(
    target: Target, tmp_path: Path
) -> None:
    with replicas("plain", target, tmp_path) as (a, b):
        send((a,), BOB)
        send((b,), MALLORY)
    assert sent_to(tmp_path) == ["bob@example.com", "mallory@example.com"]


@pytest.mark.parametrize("when", ["before", "after"], ids=["edited-before-yes", "edited-after-yes"])
def test_an_edited_retry_never_runs_its_edited_arguments(
    target: Target, tmp_path: Path, when: str
) -> None:
    ledger = target.open()
    with replicas("once", target, tmp_path) as (a, b):
        [asked] = send((a,), BOB)
        shown = ticket_of(asked)
        if when == "after":
            ledger.approve(shown, by="ann")
        first = send((a,), MALLORY)
        if when == "before":
            ledger.approve(shown, by="ann")
        retries = [*first, *send((b,), MALLORY), *send((a, b), MALLORY)]
        assert all(r.is_error for r in retries), retries
        assert sent_to(tmp_path) == []  # mallory never; bob's yes is still unspent
        send((a, b), BOB)  # the arguments the person saw run, once
    assert sent_to(tmp_path) == ["bob@example.com"]
    assert [t.state for t in ledger.approvals() if t.args["to"] == "bob@example.com"] == ["spent"]


@pytest.mark.parametrize("no", ["ledger", "cli"])
def test_a_later_no_wins_over_a_yes_not_yet_spent(
    target: Target, tmp_path: Path, no: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger = target.open()
    with replicas("once", target, tmp_path) as (a, b):
        shown = ticket_of(send((a,), BOB)[0])
        ledger.approve(shown, by="ann")
        if no == "ledger":
            ledger.deny(shown, by="lead", reason="wrong customer")
        else:
            monkeypatch.setenv("CALL4AGENTS_SECRET", target.env()["CALL4AGENTS_SECRET"])
            where = ["--url", target.url, *(["--schema", target.schema] if target.schema else [])]
            assert cli(["deny", shown, "--by", "lead", *where]) == 0
        refused = send((a, b), BOB)
    assert all(r.is_error for r in refused)
    assert {r.meta["io.call4agents/outcome"]["outcome"] for r in refused} == {"denied"}
    assert sent_to(tmp_path) == []
