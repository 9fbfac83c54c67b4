"""OnceOnly on a real MCPServer, talked to by the SDK's own in-memory client.

Every side effect is a line in an outbox file outside the ledger; every ledger runs on SQLite and
PostgreSQL. Both protocol eras are exercised: the 2026-07-28 per-request envelope (``auto``) and
the initialize handshake (``legacy``).
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import textwrap
import threading
import uuid
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, NoReturn

import anyio
import pytest
from mcp import Client
from mcp.server import Server
from mcp.server.context import ServerRequestContext
from mcp.server.mcpserver import Elicit, MCPServer, Resolve
from mcp.types import (
    CallToolRequestParams,
    CallToolResult,
    ElicitResult,
    ListToolsResult,
    TextContent,
    Tool,
    ToolAnnotations,
)
from pydantic import BaseModel
from sqlalchemy import event

import call4agents as c4a
from call4agents.integration import action_for, recorded_with_other_args, run_tool
from call4agents_mcp import KEY_META, OnceOnly, call_tool
from tests.conftest import Target

MODES = ["auto", "legacy"]


class Outbox:
    """The outside world: one fsynced line per delivered message."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def deliver(self, **fields: Any) -> int:
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(fields) + "\n")
        return self.count()

    def count(self) -> int:
        return len(self.path.read_text().splitlines()) if self.path.exists() else 0


@pytest.fixture
def outbox(tmp_path: Path) -> Outbox:
    return Outbox(tmp_path / "outbox.jsonl")


def mail_server(outbox: Outbox, *, once: OnceOnly | None = None, **server: Any) -> MCPServer:
    app = MCPServer("mail", middleware=[once or OnceOnly()], **server)

    @app.tool()
    def send_email(to: str, body: str) -> str:
        now = c4a.current()  # also in a call run without the ledger, where it says so
        n = outbox.deliver(to=to, key=now.idempotency_key, covered=now.covered)
        return f"message #{n} to {to}"

    @app.tool(annotations=ToolAnnotations(read_only_hint=True))
    def count_messages(folder: str) -> int:
        outbox.deliver(read=folder, covered=c4a.current().covered)
        return outbox.count()

    return app


def text(result: CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


def outcome(result: CallToolResult) -> str | None:
    marker = (result.meta or {}).get("io.call4agents/outcome")
    return marker["outcome"] if marker else None


def structured(result: CallToolResult) -> dict[str, Any]:
    """The ledger's details of an error result: in _meta, never in structuredContent (which
    must match the tool's outputSchema)."""
    assert result.is_error, result
    assert result.structured_content is None, result
    info = (result.meta or {})["io.call4agents/outcome"]
    assert isinstance(info, dict)
    return info


# -- retries with a client key --------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_retry_with_same_key_runs_once_and_returns_first_result(
    ledger: c4a.Ledger, outbox: Outbox, mode: str
) -> None:
    server = mail_server(outbox)

    async def main() -> list[CallToolResult]:
        async with Client(server, mode=mode) as client:
            args = {"to": "bob@example.com", "body": "Your refund is on its way"}
            first = await client.call_tool("send_email", args, meta={KEY_META: "k-1"})
            again = await client.call_tool("send_email", args, meta={KEY_META: "k-1"})
            return [first, again]

    first, again = anyio.run(main)
    assert outbox.count() == 1
    assert text(again) == text(first) == "message #1 to bob@example.com"
    assert not again.is_error
    assert outcome(first) is None
    assert outcome(again) == "replayed"
    [record] = ledger.effects()
    assert (record.tool, record.state, record.run_id) == (
        "send_email",
        "succeeded",
        "mcp:anonymous",
    )


def test_client_helper_sends_the_same_key_across_clients(
    ledger: c4a.Ledger, outbox: Outbox
) -> None:
    server = mail_server(outbox)

    async def call_once() -> CallToolResult:
        # A fresh client per call: the process that retries is not the one that lost the answer.
        async with Client(server) as client, c4a.run("ticket-1234"):
            return await call_tool(client, "send_email", {"to": "bob@example.com", "body": "hi"})

    first = anyio.run(call_once)
    again = anyio.run(call_once)
    assert outbox.count() == 1
    assert text(again) == text(first)
    assert outcome(again) == "replayed"


def test_tool_sees_the_ledger_key(ledger: c4a.Ledger, outbox: Outbox) -> None:
    server = mail_server(outbox)

    async def main() -> None:
        async with Client(server) as client:
            await client.call_tool("send_email", {"to": "a@x", "body": "b"}, meta={KEY_META: "k"})

    anyio.run(main)
    [record] = ledger.effects()
    [line] = outbox.path.read_text().splitlines()
    assert json.loads(line)["key"] == record.idempotency_key


@pytest.mark.parametrize("mode", MODES)
def test_key_reused_with_other_arguments_is_refused(
    ledger: c4a.Ledger, outbox: Outbox, mode: str
) -> None:
    server = mail_server(outbox)

    async def main() -> CallToolResult:
        async with Client(server, mode=mode) as client:
            await client.call_tool("send_email", {"to": "a@x", "body": "hi"}, meta={KEY_META: "k"})
            return await client.call_tool(
                "send_email", {"to": "mallory@x", "body": "hi"}, meta={KEY_META: "k"}
            )

    refused = anyio.run(main)
    assert outbox.count() == 1
    assert refused.is_error
    assert structured(refused)["outcome"] == "key_reused"
    assert "other arguments" in text(refused)


def redacted_mail_server(outbox: Outbox) -> MCPServer:
    return mail_server(
        outbox, once=OnceOnly(tools={"send_email": c4a.EffectOptions(redact=("body",))})
    )


def send_bodies(server: MCPServer, *bodies: str) -> list[CallToolResult]:
    async def main() -> list[CallToolResult]:
        async with Client(server) as client:
            return [
                await client.call_tool(
                    "send_email", {"to": "a@x", "body": body}, meta={KEY_META: "k"}
                )
                for body in bodies
            ]

    return anyio.run(main)


def test_key_reuse_is_seen_through_a_redacted_field(ledger: c4a.Ledger, outbox: Outbox) -> None:
    # The ledger keeps "***" for the body, and a digest of the arguments in which the body
    # counts by its HMAC: another body under the same key is another action, refused.
    first, other, same = send_bodies(
        redacted_mail_server(outbox), "first secret", "second secret", "first secret"
    )
    assert outbox.count() == 1
    assert structured(other)["outcome"] == "key_reused"
    assert "second secret" not in text(other)
    assert outcome(same) == "replayed"
    assert text(same) == text(first)


def test_a_key_taken_up_after_a_failure_is_judged_by_the_call_that_ran(
    ledger: c4a.Ledger,
) -> None:
    # Two calls with one client key and other arguments can both pass the server's check while
    # no row exists. The first fails (nothing happened); the second takes the key up and runs.
    # From then on the key is the second call's: its retry is a replay, the first one's a reuse.
    options = c4a.EffectOptions(key=lambda **_: "client-key")
    first, second = (
        action_for("send_email", {"to": to}, options, run_id="mcp:anonymous", ledger=ledger)
        for to in ("a@x", "b@x")
    )
    assert first.key == second.key

    def refused() -> NoReturn:
        raise ConnectionError("the provider refused it: not sent")

    with pytest.raises(ConnectionError):
        run_tool(first, refused)
    assert run_tool(second, lambda: {"sent": "b@x"}) == {"sent": "b@x"}
    row = ledger.store.get(first.key)
    assert not recorded_with_other_args(second, row)
    assert recorded_with_other_args(first, row)


def test_invalid_key_is_refused_before_running(ledger: c4a.Ledger, outbox: Outbox) -> None:
    server = mail_server(outbox)

    async def main() -> CallToolResult:
        async with Client(server) as client:
            return await client.call_tool(
                "send_email", {"to": "a", "body": "b"}, meta={KEY_META: 7}
            )

    refused = anyio.run(main)
    assert refused.is_error
    assert structured(refused)["outcome"] == "refused"
    assert outbox.count() == 0


def test_identity_namespaces_client_keys(target: Target, outbox: Outbox) -> None:
    ledger = target.open()
    tenants = {
        name: mail_server(outbox, once=OnceOnly(ledger=ledger, identity=lambda ctx, n=name: n))
        for name in ("tenant-a", "tenant-b")
    }

    async def main() -> None:
        for server in tenants.values():
            async with Client(server) as client:
                await client.call_tool("send_email", {"to": "a", "body": "b"}, meta={KEY_META: "k"})

    anyio.run(main)
    assert outbox.count() == 2
    assert sorted(r.run_id for r in ledger.effects()) == ["mcp:tenant-a", "mcp:tenant-b"]


# -- a duplicate while the first still runs ---------------------------------------------------


def concurrent_duplicates(
    ledger: c4a.Ledger, outbox: Outbox, once: OnceOnly, *, until_answered: bool = False
) -> list[CallToolResult]:
    """Two identical keyed calls at once; the tool finishes only after the second has claimed
    (and, ``until_answered``, after the second has been answered: its claim must judge a row
    still running, however slow the machine is between its insert and its read)."""
    second_claim = threading.Event()
    answered = threading.Event()
    claims = []

    @event.listens_for(ledger.engine, "after_cursor_execute")
    def _count_claims(conn: Any, cursor: Any, statement: str, *rest: Any) -> None:
        # The duplicate's claim met the first call's started row in the same transaction, so it
        # must wait (or give up): only then may the slow tool finish.
        if statement.lstrip().upper().startswith("INSERT") and "effects" in statement:
            claims.append(statement)
            if len(claims) == 2:
                second_claim.set()

    app = MCPServer("slow", middleware=[once])

    @app.tool()
    def transfer(amount: int) -> str:
        assert second_claim.wait(timeout=60)
        assert not until_answered or answered.wait(timeout=60)
        n = outbox.deliver(amount=amount)
        return f"transfer #{n}"

    async def main() -> list[CallToolResult]:
        results: list[CallToolResult] = []
        async with Client(app) as client:

            async def call() -> None:
                meta = {KEY_META: "pay-1"}
                results.append(await client.call_tool("transfer", {"amount": 5}, meta=meta))
                answered.set()

            async with anyio.create_task_group() as tg:
                tg.start_soon(call)
                tg.start_soon(call)
        return results

    return anyio.run(main)


def test_concurrent_duplicate_waits_for_the_first_result(
    ledger: c4a.Ledger, outbox: Outbox
) -> None:
    results = concurrent_duplicates(ledger, outbox, OnceOnly())
    assert outbox.count() == 1
    assert [text(r) for r in results] == ["transfer #1", "transfer #1"]
    assert sorted(str(outcome(r)) for r in results) == ["None", "replayed"]


def test_duplicate_still_running_past_the_wait_is_in_progress(
    ledger: c4a.Ledger, outbox: Outbox
) -> None:
    once = OnceOnly(default=c4a.EffectOptions(wait=0))
    found = concurrent_duplicates(ledger, outbox, once, until_answered=True)
    first, busy = sorted(found, key=lambda r: r.is_error)
    assert outbox.count() == 1
    assert text(first) == "transfer #1"
    assert busy.is_error
    assert structured(busy)["outcome"] == "in_progress"
    assert structured(busy)["retryable"] is True


def test_without_cancel_grace_a_cancelled_call_is_in_doubt(
    ledger: c4a.Ledger, outbox: Outbox
) -> None:
    never = anyio.Event()
    app = MCPServer("pay", middleware=[OnceOnly(cancel_grace=None)])

    @app.tool()
    async def transfer(amount: int) -> str:
        await never.wait()  # the client gives up first
        return f"transfer #{outbox.deliver(amount=amount)}"

    async def main() -> CallToolResult:
        async with Client(app) as client:
            meta = {KEY_META: "pay-1"}
            # Long enough for the claim to land first on a loaded machine: the tool never ends.
            with pytest.raises(Exception, match="Timed out"):
                await client.call_tool(
                    "transfer", {"amount": 5}, meta=meta, read_timeout_seconds=1.5
                )
            return await client.call_tool("transfer", {"amount": 5}, meta=meta)

    again = anyio.run(main)
    assert structured(again)["outcome"] == "in_doubt"
    assert "Cancelled" in structured(again)["reason"]
    assert outbox.count() == 0


# -- rounds that ask the client -------------------------------------------------------------------


class Confirm(BaseModel):
    ok: bool


def confirm(amount: int) -> Elicit[Confirm]:
    # Module level: the tool's annotations name it, and the SDK resolves them by name.
    return Elicit(f"Charge {amount}?", Confirm)


@pytest.mark.parametrize("mode", MODES)
def test_elicitation_round_is_not_cached(ledger: c4a.Ledger, outbox: Outbox, mode: str) -> None:
    asked: list[str] = []
    app = MCPServer("pay", middleware=[OnceOnly()])

    @app.tool()
    def charge(amount: int, ok: Annotated[Confirm, Resolve(confirm)]) -> str:
        n = outbox.deliver(amount=amount, ok=ok.ok)
        return f"charge #{n}: {amount}" if ok.ok else "cancelled"

    async def on_elicit(context: Any, params: Any) -> ElicitResult:
        asked.append(params.message)
        return ElicitResult(action="accept", content={"ok": True})

    async def main() -> list[CallToolResult]:
        async with Client(app, mode=mode, elicitation_callback=on_elicit) as client:
            meta = {KEY_META: "charge-1"}
            first = await client.call_tool("charge", {"amount": 7}, meta=meta)
            again = await client.call_tool("charge", {"amount": 7}, meta=meta)
            return [first, again]

    first, again = anyio.run(main)
    assert text(first) == text(again) == "charge #1: 7"
    assert outbox.count() == 1
    assert asked == ["Charge 7?"]  # the replay asked nothing
    [record] = ledger.effects()
    assert record.state == "succeeded"
    assert record.result["content"][0]["text"] == "charge #1: 7"
    # 2026-07-28 asks in an input_required round (recorded as not acted), then re-sends the call;
    # the handshake era asks in-band, inside the one attempt.
    assert record.attempt == (2 if mode == "auto" else 1)


# -- annotations and per-tool options -------------------------------------------------------------


def test_read_only_tools_are_not_recorded(ledger: c4a.Ledger, outbox: Outbox) -> None:
    server = mail_server(outbox)

    async def main() -> None:
        async with Client(server) as client:
            for _ in range(2):
                await client.call_tool("count_messages", {"folder": "in"}, meta={KEY_META: "r"})

    anyio.run(main)
    assert outbox.count() == 2
    assert ledger.effects() == []


def test_explicit_options_win_over_annotations(ledger: c4a.Ledger, outbox: Outbox) -> None:
    server = mail_server(outbox, once=OnceOnly(tools={"count_messages": {"kind": "write"}}))

    async def main() -> None:
        async with Client(server) as client:
            for _ in range(2):
                await client.call_tool("count_messages", {"folder": "in"}, meta={KEY_META: "r"})

    anyio.run(main)
    assert outbox.count() == 1
    assert [r.tool for r in ledger.effects()] == ["count_messages"]


def test_annotations_can_be_ignored(ledger: c4a.Ledger, outbox: Outbox) -> None:
    server = mail_server(outbox, once=OnceOnly(annotations=False))

    async def main() -> None:
        async with Client(server) as client:
            for _ in range(2):
                await client.call_tool("count_messages", {"folder": "in"}, meta={KEY_META: "r"})

    anyio.run(main)
    assert outbox.count() == 1


def flaky_server(
    outbox: Outbox, error: Callable[[], Exception], hints: ToolAnnotations | None = None
) -> MCPServer:
    """A tool that raises ``error()`` on its first run and succeeds after."""
    app = MCPServer("flaky", middleware=[OnceOnly()])

    @app.tool(annotations=hints)
    def book(seat: str) -> str:
        n = outbox.deliver(seat=seat)
        if n == 1:
            raise error()
        return f"booked {seat} on run {n}"

    return app


def call_twice(server: MCPServer, key: str = "b-1") -> list[CallToolResult]:
    async def main() -> list[CallToolResult]:
        async with Client(server) as client:
            meta = {KEY_META: key}
            return [await client.call_tool("book", {"seat": "12A"}, meta=meta) for _ in range(2)]

    return anyio.run(main)


@pytest.mark.parametrize(
    "error", [lambda: TimeoutError("no answer from the airline"), lambda: c4a.OutcomeUnknown("?")]
)
def test_in_doubt_call_is_never_rerun(
    ledger: c4a.Ledger, outbox: Outbox, error: Callable[[], Exception]
) -> None:
    first, again = call_twice(flaky_server(outbox, error))
    assert outbox.count() == 1
    for result in (first, again):
        assert result.is_error
        assert structured(result)["outcome"] == "in_doubt"
        assert structured(result)["retryable"] is False
        assert "may" in text(result)
    [record] = ledger.in_doubt()
    assert record.tool == "book"


def test_failed_call_runs_again(ledger: c4a.Ledger, outbox: Outbox) -> None:
    first, again = call_twice(flaky_server(outbox, lambda: ValueError("seat map not loaded")))
    assert outbox.count() == 2
    assert first.is_error
    assert structured(first)["outcome"] == "failed"
    assert structured(first)["retryable"] is True
    assert text(again) == "booked 12A on run 2"
    assert [r.state for r in ledger.effects()] == ["succeeded"]


def test_idempotent_hint_lets_an_in_doubt_call_run_again(
    ledger: c4a.Ledger, outbox: Outbox
) -> None:
    hints = ToolAnnotations(idempotent_hint=True)
    first, again = call_twice(flaky_server(outbox, lambda: TimeoutError("slow"), hints))
    assert structured(first)["outcome"] == "in_doubt"
    assert text(again) == "booked 12A on run 2"
    assert outbox.count() == 2


def test_destructive_hint_makes_a_tool_irreversible(
    target: Target, outbox: Outbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CALL4AGENTS_SECRET", "test-secret-" + "x" * 40)  # approvals are signed
    ledger = target.open(approval_for=("irreversible",))
    app = MCPServer("files", middleware=[OnceOnly(ledger=ledger)])

    @app.tool(annotations=ToolAnnotations(destructive_hint=True))
    def delete_folder(path: str) -> str:
        outbox.deliver(deleted=path)
        return "deleted"

    async def main() -> CallToolResult:
        async with Client(app) as client:
            return await client.call_tool("delete_folder", {"path": "/"}, meta={KEY_META: "rm"})

    asked = anyio.run(main)
    assert structured(asked)["outcome"] == "approval_required"
    assert outbox.count() == 0
    assert structured(asked)["approval"]["tool"] == "delete_folder"


# -- without a client key -------------------------------------------------------------------------


def test_without_key_identical_calls_within_the_window_run_once(
    ledger: c4a.Ledger, outbox: Outbox
) -> None:
    server = mail_server(outbox, once=OnceOnly(anonymous_window=True))

    async def main() -> None:
        async with Client(server) as client:
            for _ in range(2):
                await client.call_tool("send_email", {"to": "bob", "body": "hi"})
            await client.call_tool("send_email", {"to": "bob", "body": "other"})

    anyio.run(main)
    assert outbox.count() == 2


# The warning these calls give once a process is tested below (keyless_warnings).
@pytest.mark.filterwarnings("ignore::call4agents.integration.Call4AgentsWarning")
def test_without_key_or_identity_calls_are_not_merged(ledger: c4a.Ledger, outbox: Outbox) -> None:
    # Two anonymous clients sending the same email are two actions, as far as anyone can tell.
    server = mail_server(outbox)

    async def main() -> None:
        for _ in range(2):
            async with Client(server) as client:
                await client.call_tool("send_email", {"to": "bob", "body": "hi"})

    anyio.run(main)  # warns once per process that such calls run without the ledger
    assert outbox.count() == 2
    assert ledger.effects() == []


def test_a_call_outside_the_ledger_runs_and_current_says_so(
    ledger: c4a.Ledger, outbox: Outbox
) -> None:
    """A keyless call from a caller with no identity (the Inspector over stdio) runs without the
    ledger; a tool that reads c4a.current() keeps working and learns the call is not covered."""
    server = mail_server(outbox)

    async def main() -> list[CallToolResult]:
        async with Client(server) as client:
            return [
                await client.call_tool("send_email", {"to": "bob", "body": "hi"}),
                await client.call_tool("send_email", {"to": "bob", "body": "hi"}),
                await client.call_tool("count_messages", {"folder": "in"}),
                await client.call_tool(
                    "send_email", {"to": "ann", "body": "hi"}, meta={KEY_META: "k"}
                ),
            ]

    results = anyio.run(main)
    assert [r.is_error for r in results] == [False] * 4, results
    lines = [json.loads(line) for line in outbox.path.read_text().splitlines()]
    assert [line["covered"] for line in lines] == [False, False, False, True]
    # Each uncovered call has a key of its own: forwarded to a provider, it merges nothing.
    first, second, _, keyed = (line.get("key") for line in lines)
    assert first != second
    assert isinstance(first, str)
    assert first.startswith("c4a-")
    [record] = ledger.effects()
    assert keyed == record.idempotency_key


def test_current_outside_any_tool_still_raises() -> None:
    with pytest.raises(c4a.Call4AgentsError, match="only available inside a tool"):
        c4a.current()


def test_without_key_a_call_after_the_window_runs_again(ledger: c4a.Ledger, outbox: Outbox) -> None:
    window = 0.2
    server = mail_server(outbox, once=OnceOnly(window=window, anonymous_window=True))

    async def main() -> None:
        async with Client(server) as client:
            await client.call_tool("send_email", {"to": "bob", "body": "hi"})
            await anyio.sleep(2.5 * window)  # two windows later: a new logical call
            await client.call_tool("send_email", {"to": "bob", "body": "hi"})

    anyio.run(main)
    assert outbox.count() == 2


# The warning these calls give once a process is tested below (keyless_warnings).
@pytest.mark.filterwarnings("ignore::call4agents.integration.Call4AgentsWarning")
def test_scope_call_tools_run_each_time_without_a_key(ledger: c4a.Ledger, outbox: Outbox) -> None:
    server = mail_server(outbox, once=OnceOnly(tools={"send_email": {"scope": "call"}}))

    async def main() -> None:
        async with Client(server) as client:
            for _ in range(2):
                await client.call_tool("send_email", {"to": "bob", "body": "hi"})
            for _ in range(2):
                await client.call_tool(
                    "send_email", {"to": "bob", "body": "hi"}, meta={KEY_META: "x"}
                )

    anyio.run(main)  # warns once per process that keyless calls of this tool skip the ledger
    assert outbox.count() == 3


# -- approvals ------------------------------------------------------------------------------------


def test_approval_needed_then_given_runs_once(ledger: c4a.Ledger, outbox: Outbox) -> None:
    server = mail_server(outbox, once=OnceOnly(tools={"send_email": {"approval": True}}))
    args = {"to": "ceo@example.com", "body": "We are closing the account"}

    async def call() -> CallToolResult:
        async with Client(server) as client:
            return await client.call_tool("send_email", args, meta={KEY_META: "ap-1"})

    asked = anyio.run(call)
    assert asked.is_error
    info = structured(asked)
    assert info["outcome"] == "approval_required"
    assert info["approval"]["args"] == args
    assert outbox.count() == 0
    ledger.approve(info["approval"]["ticket"], by="ann@example.com")
    ran, again = anyio.run(call), anyio.run(call)
    assert text(ran) == text(again) == "message #1 to ceo@example.com"
    assert outbox.count() == 1


@pytest.mark.parametrize("mode", MODES)
def test_two_clients_first_calls_are_not_one_edited_call(
    ledger: c4a.Ledger, outbox: Outbox, mode: str
) -> None:
    """Every connection numbers its requests from the start, so two clients' first tools/call
    share a JSON-RPC id. Two keys, two calls: the second is asked about on its own, not refused
    as an edit of the first (which told the model "do not retry it"), and each yes runs its own."""
    server = mail_server(outbox, once=OnceOnly(tools={"send_email": {"approval": True}}))
    bob, eve = ({"to": to, "body": "Your refund"} for to in ("bob@example.com", "eve@example.com"))

    async def call(args: dict[str, str], key: str) -> CallToolResult:
        async with Client(server, mode=mode) as client:  # a new connection each time
            return await client.call_tool("send_email", args, meta={KEY_META: key})

    asked = [anyio.run(call, bob, "two-1"), anyio.run(call, eve, "two-2")]
    infos = [structured(r) for r in asked]
    assert [i["outcome"] for i in infos] == ["approval_required"] * 2
    assert "changed" not in infos[1]["message"], infos[1]["message"]
    assert [i["approval"]["args"]["to"] for i in infos] == [bob["to"], eve["to"]]
    for info in infos:
        ledger.approve(info["approval"]["ticket"], by="ann@example.com")
    ran = [anyio.run(call, bob, "two-1"), anyio.run(call, eve, "two-2")]
    assert [text(r) for r in ran] == [
        "message #1 to bob@example.com",
        "message #2 to eve@example.com",
    ]
    assert outbox.count() == 2


def test_denied_call_reports_it(ledger: c4a.Ledger, outbox: Outbox) -> None:
    server = mail_server(outbox, once=OnceOnly(tools={"send_email": {"approval": True}}))

    async def call() -> CallToolResult:
        async with Client(server) as client:
            return await client.call_tool(
                "send_email", {"to": "x", "body": "y"}, meta={KEY_META: "d"}
            )

    ticket = structured(anyio.run(call))["approval"]["ticket"]
    ledger.deny(ticket, by="ann@example.com", reason="not today")
    denied = anyio.run(call)
    assert denied.is_error
    assert structured(denied)["outcome"] == "denied"
    assert outbox.count() == 0


# -- other ways to plug it in ---------------------------------------------------------------------


def test_as_extension_it_is_advertised_and_works(ledger: c4a.Ledger, outbox: Outbox) -> None:
    app = MCPServer("ext", extensions=[OnceOnly(tools={"send": {"kind": "write"}})])

    @app.tool()
    def send(to: str) -> str:
        return f"sent #{outbox.deliver(to=to)}"

    async def main() -> tuple[Any, list[CallToolResult]]:
        async with Client(app) as client:
            meta = {KEY_META: "e-1"}
            calls = [await client.call_tool("send", {"to": "bob"}, meta=meta) for _ in range(2)]
            return client.server_capabilities.extensions, calls

    extensions, (first, again) = anyio.run(main)
    assert extensions["io.call4agents/once-only"]["metaKey"] == KEY_META
    assert text(first) == text(again) == "sent #1"
    assert outcome(again) == "replayed"


@pytest.mark.parametrize("mode", MODES)
def test_middleware_advertises_the_extension(ledger: c4a.Ledger, outbox: Outbox, mode: str) -> None:
    """Under SEP-2133's ``extensions`` from 2026-07-28; on the handshake era, whose schema has no
    ``extensions`` (the SDK drops its own there), under ``experimental``, its place for
    capabilities outside the standard."""

    async def main() -> Any:
        async with Client(mail_server(outbox), mode=mode) as client:
            return client.server_capabilities

    capabilities = anyio.run(main)
    settings = {"metaKey": KEY_META, "windowSeconds": 600.0}
    if mode == "legacy":
        assert capabilities.extensions is None
        assert capabilities.experimental == {"io.call4agents/once-only": settings}
    else:
        assert capabilities.extensions == {"io.call4agents/once-only": settings}
        assert capabilities.experimental is None


def test_given_as_middleware_and_extension_it_acts_once(ledger: c4a.Ledger, outbox: Outbox) -> None:
    once = OnceOnly()
    app = MCPServer("both", middleware=[once], extensions=[once])

    @app.tool()
    def send(to: str) -> str:
        return f"sent #{outbox.deliver(to=to)}"

    async def main() -> list[CallToolResult]:
        async with Client(app) as client:
            return [await client.call_tool("send", {"to": "b"}, meta={KEY_META: "k"}) for _ in "12"]

    first, again = anyio.run(main)
    assert text(first) == text(again) == "sent #1"
    assert len(ledger.effects()) == 1


def test_lowlevel_server_with_annotations(ledger: c4a.Ledger, outbox: Outbox) -> None:
    tools = [
        Tool(name="pay", input_schema={"type": "object"}),
        Tool(
            name="balance",
            input_schema={"type": "object"},
            annotations=ToolAnnotations(read_only_hint=True),
        ),
    ]

    async def list_tools(ctx: ServerRequestContext[Any, Any], params: Any) -> ListToolsResult:
        return ListToolsResult(tools=tools)

    async def call(ctx: ServerRequestContext[Any, Any], params: CallToolRequestParams) -> Any:
        n = outbox.deliver(tool=params.name)
        return CallToolResult(content=[TextContent(type="text", text=f"{params.name} #{n}")])

    low = Server("low", on_list_tools=list_tools, on_call_tool=call)
    low.middleware.append(OnceOnly())

    async def main() -> list[str]:
        async with Client(low) as client:
            return [
                text(await client.call_tool(name, {}, meta={KEY_META: name}))
                for name in ("pay", "pay", "balance", "balance")
            ]

    assert anyio.run(main) == ["pay #1", "pay #1", "balance #2", "balance #3"]


def test_credentials_cannot_be_injected_into_mcp_tools() -> None:
    with pytest.raises(c4a.ConfigurationError, match="credentials"):
        OnceOnly(tools={"send_email": {"credentials": {"api_key": "MAIL_KEY"}}})


# -- as the bare SDK where once-only has nothing to say -------------------------------------------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("keyed", [True, False], ids=["client-key", "keyless-window"])
def test_a_call_to_an_unknown_tool_is_the_sdks_own_error_and_writes_nothing(
    ledger: c4a.Ledger, outbox: Outbox, mode: str, keyed: bool
) -> None:
    """Both ways a call is keyed: by the client's key, or (keyless) by the window, which
    ``anonymous_window=True`` applies to the in-memory client's calls."""
    meta = {KEY_META: "k-1"} if keyed else None

    async def main(server: MCPServer) -> CallToolResult:
        async with Client(server, mode=mode) as client:
            return await client.call_tool("send_emial", {"to": "bob"}, meta=meta)

    bare = anyio.run(main, MCPServer("mail"))
    told = anyio.run(main, mail_server(outbox, once=OnceOnly(anonymous_window=True)))
    assert told.is_error
    assert bare.is_error
    assert text(told) == text(bare) == "Unknown tool: send_emial"
    assert told.meta == bare.meta  # no ledger outcome, so nothing marks it retryable
    assert ledger.effects() == []


def test_a_tool_a_lowlevel_server_serves_but_does_not_list_runs_as_bare_with_a_warning(
    ledger: c4a.Ledger, outbox: Outbox
) -> None:
    """Nothing is recorded for a name the listing does not show; where the handler runs it
    anyway, it ran outside the ledger, and the server says so once."""
    from call4agents_mcp import Call4AgentsWarning

    hidden = f"hidden_{uuid.uuid4().hex[:8]}"  # warnings are once per process and tool

    async def list_tools(ctx: ServerRequestContext[Any, Any], params: Any) -> ListToolsResult:
        return ListToolsResult(tools=[Tool(name="pay", input_schema={"type": "object"})])

    async def call(ctx: ServerRequestContext[Any, Any], params: CallToolRequestParams) -> Any:
        n = outbox.deliver(tool=params.name)
        return CallToolResult(content=[TextContent(type="text", text=f"{params.name} #{n}")])

    low = Server("low", on_list_tools=list_tools, on_call_tool=call)
    low.middleware.append(OnceOnly())

    async def main() -> list[str]:
        async with Client(low) as client:
            return [text(await client.call_tool(hidden, {}, meta={KEY_META: "h"})) for _ in "12"]

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert anyio.run(main) == [f"{hidden} #1", f"{hidden} #2"]
    assert ledger.effects() == []
    [warned] = [w for w in caught if hidden in str(w.message)]
    assert warned.category is Call4AgentsWarning
    assert "not in this server's tools/list" in str(warned.message)


def keyless_calls(name: str, times: int) -> tuple[list[CallToolResult], list[str]]:
    """``times`` keyless calls from an anonymous caller to a fresh server's tool, named ``name``
    and a suffix of its own (warnings are given once per process and tool), and what it did."""
    tool = f"{name}_{uuid.uuid4().hex[:8]}"
    app = MCPServer("keyless", middleware=[OnceOnly()])
    done: list[str] = []

    @app.tool(name=tool)
    def send(to: str) -> str:
        done.append(to)
        return f"sent #{len(done)}"

    async def main() -> list[CallToolResult]:
        async with Client(app) as client:
            return [await client.call_tool(tool, {"to": "bob"}) for _ in range(times)]

    return anyio.run(main), done


def keyless_warnings(caught: list[warnings.WarningMessage]) -> list[warnings.WarningMessage]:
    return [w for w in caught if "no idempotency key" in str(w.message)]


def test_the_keyless_warning_is_given_once_in_a_category_of_its_own(ledger: c4a.Ledger) -> None:
    from call4agents_mcp import Call4AgentsWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        results, done = keyless_calls("send_once_warned", 3)
    [warned] = keyless_warnings(caught)
    assert warned.category is Call4AgentsWarning
    assert issubclass(Call4AgentsWarning, RuntimeWarning)
    assert "send_once_warned_" in str(warned.message)
    assert [r.is_error for r in results] == [False] * 3
    assert done == ["bob"] * 3  # outside the ledger, as the warning says


def test_the_keyless_warning_never_turns_a_call_into_an_error(
    ledger: c4a.Ledger, caplog: pytest.LogCaptureFixture
) -> None:
    from call4agents_mcp import Call4AgentsWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("error")  # as python -W error, or a suite's filterwarnings = error
        results, done = keyless_calls("send_under_error_filter", 2)
    assert [r.is_error for r in results] == [False, False]
    assert done == ["bob", "bob"]
    # Shown all the same, once, as the warning it is (pytest lists it in its summary) ...
    [shown] = keyless_warnings(caught)
    assert shown.category is Call4AgentsWarning
    # ... and not written to the log, where a suite asserting on its server's records sees it.
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_the_keyless_warning_under_w_error_is_on_stderr_and_the_call_succeeds(
    tmp_path: Path,
) -> None:
    """``python -W error``: the process's own filters, its own once-per-process warning."""
    child = tmp_path / "child.py"
    child.write_text(
        textwrap.dedent(f"""
            import anyio
            from mcp import Client
            from mcp.server.mcpserver import MCPServer
            import call4agents as c4a
            from call4agents_mcp import OnceOnly

            c4a.init("sqlite:///{tmp_path / "ledger.db"}")
            app = MCPServer("keyless", middleware=[OnceOnly()])
            done = []

            @app.tool()
            def send(to: str) -> str:
                done.append(to)
                return "sent"

            async def main():
                async with Client(app) as client:
                    return [await client.call_tool("send", {{"to": "bob"}}) for _ in range(2)]

            print([r.is_error for r in anyio.run(main)], len(done))
        """),
        encoding="utf-8",
    )
    ran = subprocess.run(
        [sys.executable, "-W", "error", str(child)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert ran.stdout.splitlines()[-1] == "[False, False] 2"
    assert ran.stderr.count("Call4AgentsWarning: send was called with no idempotency key") == 1


def test_the_keyless_warning_can_be_filtered_by_its_category(
    ledger: c4a.Ledger, caplog: pytest.LogCaptureFixture
) -> None:
    from call4agents_mcp import Call4AgentsWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("error")
        warnings.filterwarnings("ignore", category=Call4AgentsWarning)
        [result], _ = keyless_calls("send_filtered", 1)
    assert not result.is_error
    assert caught == []
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
