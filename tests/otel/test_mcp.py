"""Spans of actions served by an MCP server with OnceOnly: one per outcome, with MCP's request id.

In a child process with the SDK's own OpenTelemetry spans on, ours nest under the SDK's
``tools/call`` server span; in this process (the in-memory exporter of tests/otel/conftest.py),
each outcome's attributes are checked.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult
from opentelemetry.trace import StatusCode

import call4agents as c4a
from call4agents_mcp import KEY_META, OnceOnly
from tests.conftest import Target, run_child
from tests.otel.conftest import Telemetry

CHILD = Path(__file__).with_name("mcp_child.py")
REPO = Path(__file__).parents[2]
RUN = "mcp:job-otel"


def test_span_nests_under_mcp_server_span(target: Target) -> None:
    done = run_child(CHILD, env=dict(target.env(), PYTHONPATH=str(REPO)))
    assert done.returncode == 0, done.stderr
    spans = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    by_id = {s["span_id"]: s for s in spans}
    ours = [s for s in spans if s["scope"] == "call4agents"]
    escalated = ours.pop()
    assert escalated["name"] == "execute_tool refund"
    assert [s["name"] for s in ours] == ["execute_tool send_email"] * 2
    assert [s["attributes"]["call4agents.outcome"] for s in ours] == ["ok", "deduped"]
    servers = [by_id[s["parent_id"]] for s in ours]
    for span, outer in zip(ours, servers, strict=True):
        assert outer["scope"] == "mcp-python-sdk"
        assert outer["name"] == "tools/call send_email"
        assert outer["attributes"]["gen_ai.operation.name"] == "execute_tool"
        assert outer["trace_id"] == span["trace_id"]
        # The GenAI tool call id is MCP's JSON-RPC id of this very request.
        request_id = outer["attributes"]["jsonrpc.request.id"]
        assert span["attributes"]["gen_ai.tool.call.id"] == request_id
    assert servers[0]["span_id"] != servers[1]["span_id"]  # the retry is its own request
    # The first call entered the run: its span carries the server's trigger; the retry's not.
    first, retry = (outer["attributes"] for outer in servers)
    assert first["call4agents.run.trigger"] == "webhook"
    assert first["call4agents.run.id"] == ours[0]["attributes"]["call4agents.run.id"]
    assert "call4agents.run.trigger" not in retry
    # The escalation ended the run: the server's span of that call carries the run's ending.
    ended = by_id[escalated["parent_id"]]
    assert ended["name"] == "tools/call refund"
    assert ended["attributes"]["call4agents.run.terminal_reason"] == "escalated"
    run_id = escalated["attributes"]["call4agents.run.id"]
    assert ended["attributes"]["call4agents.run.id"] == run_id


# -- one span per outcome, in this process ------------------------------------------------------


def attrs(span: Any) -> dict[str, Any]:
    return dict(span.attributes or {})


def server(once: OnceOnly, tool: Any) -> tuple[MCPServer, list[str]]:
    """An MCP server with one tool, and the request ids of the tools/calls it receives."""
    app = MCPServer("otel", middleware=[once])
    app.tool()(tool)
    request_ids: list[str] = []

    async def spy(ctx: Any, call_next: Any) -> Any:
        if ctx.method == "tools/call":
            request_ids.append(str(ctx.request_id))
        return await call_next(ctx)

    app.middleware.insert(0, spy)  # outside OnceOnly: it sees calls the ledger answers
    return app, request_ids


def call_twice(app: MCPServer, name: str, args: dict[str, Any]) -> list[CallToolResult]:
    async def main() -> list[CallToolResult]:
        async with Client(app) as client:
            return [await client.call_tool(name, args, meta={KEY_META: "k-1"}) for _ in "12"]

    return anyio.run(main)


def test_ok_then_deduped(target: Target, telemetry: Telemetry) -> None:
    ledger = target.open()

    def send_email(to: str) -> dict[str, Any]:
        return {"id": "msg-1", "to": to}

    app, request_ids = server(OnceOnly(ledger=ledger, identity=lambda ctx: "job-otel"), send_email)
    call_twice(app, "send_email", {"to": "bob@example.com"})
    first, second = telemetry.spans()
    [record] = ledger.effects(RUN)
    a, b = attrs(first), attrs(second)
    assert first.name == "execute_tool send_email"
    assert a["gen_ai.operation.name"] == "execute_tool"
    assert a["gen_ai.tool.name"] == "send_email"
    assert a["call4agents.run.id"] == RUN
    assert a["call4agents.side_effect"] == "write"
    assert a["call4agents.idempotency_key"] == record.idempotency_key
    assert a["call4agents.attempt"] == 1
    assert a["call4agents.outcome"] == "ok"
    assert b["call4agents.outcome"] == "deduped"
    assert [a["gen_ai.tool.call.id"], b["gen_ai.tool.call.id"]] == request_ids
    assert request_ids[0] != request_ids[1]
    assert first.status.status_code is StatusCode.UNSET
    assert second.status.status_code is StatusCode.UNSET


def test_error_then_ok(target: Target, telemetry: Telemetry) -> None:
    runs: list[str] = []

    def book(seat: str) -> str:
        runs.append(seat)
        if len(runs) == 1:
            raise ValueError("seat map not loaded")  # did not act: a retry runs again
        return f"booked {seat}"

    once = OnceOnly(ledger=target.open(), identity=lambda ctx: "job-otel")
    app, request_ids = server(once, book)
    call_twice(app, "book", {"seat": "12A"})
    failed, ok = telemetry.spans()
    assert attrs(failed)["call4agents.outcome"] == "error"
    assert attrs(failed)["error.type"] == "ValueError"  # the tool's own error, not a wrapper
    assert failed.status.status_code is StatusCode.ERROR
    assert attrs(ok)["call4agents.outcome"] == "ok"
    assert attrs(ok)["call4agents.attempt"] == 2
    assert [attrs(s)["gen_ai.tool.call.id"] for s in (failed, ok)] == request_ids


def test_in_doubt_and_timeout(target: Target, telemetry: Telemetry) -> None:
    ledger = target.open()

    def restock(item: str) -> str:
        raise c4a.OutcomeUnknown("the warehouse hung up")

    def pay(amount: int) -> str:
        raise TimeoutError("no answer from the bank")

    once = OnceOnly(ledger=ledger, identity=lambda ctx: "job-otel")
    for tool, args in ((restock, {"item": "x"}), (pay, {"amount": 5})):
        app, _ = server(once, tool)
        results = call_twice(app, tool.__name__, args)
        assert all(r.is_error for r in results)
    outcomes = [(s.name, attrs(s)["call4agents.outcome"]) for s in telemetry.spans()]
    assert outcomes == [
        ("execute_tool restock", "in_doubt"),
        ("execute_tool restock", "in_doubt"),  # the retry met the record: not run again
        ("execute_tool pay", "timeout"),
        ("execute_tool pay", "in_doubt"),
    ]
    assert all(s.status.status_code is StatusCode.ERROR for s in telemetry.spans())
    assert len(ledger.in_doubt()) == 2


def test_approval_required_then_denied(target: Target, telemetry: Telemetry) -> None:
    ledger = target.open()

    def wire(amount: int) -> str:
        raise AssertionError("a denied call must not run")

    once = OnceOnly(
        ledger=ledger, identity=lambda ctx: "job-otel", tools={"wire": {"approval": True}}
    )
    app, request_ids = server(once, wire)

    async def ask() -> CallToolResult:
        async with Client(app) as client:
            return await client.call_tool("wire", {"amount": 900}, meta={KEY_META: "w-1"})

    asked = anyio.run(ask)
    ticket = (asked.meta or {})["io.call4agents/outcome"]["approval"]["ticket"]
    ledger.deny(ticket, by="ann@example.com", reason="not today")
    anyio.run(ask)
    waiting, denied = telemetry.spans()
    assert attrs(waiting)["call4agents.outcome"] == "approval_required"
    assert attrs(waiting)["call4agents.approval.ticket"] == ticket
    assert waiting.status.status_code is StatusCode.UNSET  # a pause, not a failure
    assert attrs(denied)["call4agents.outcome"] == "denied"
    assert attrs(denied)["call4agents.approval.ticket"] == ticket
    assert attrs(denied)["call4agents.approval.decided_by"] == "ann@example.com"
    assert [attrs(s)["gen_ai.tool.call.id"] for s in (waiting, denied)] == request_ids


def test_in_progress_while_the_same_call_still_runs(target: Target, telemetry: Telemetry) -> None:
    """A client retries a keyed call while the first is still running on the server."""
    once = OnceOnly(
        ledger=target.open(),
        identity=lambda ctx: "job-otel",
        default=c4a.EffectOptions(wait=0),
    )
    inside, release = anyio.Event(), anyio.Event()

    async def transfer(amount: int) -> str:
        inside.set()
        await release.wait()
        return f"sent {amount}"

    app, request_ids = server(once, transfer)

    async def main() -> list[CallToolResult]:
        results: list[CallToolResult] = []
        async with Client(app) as client:

            async def first() -> None:
                results.append(await client.call_tool("transfer", {"amount": 5}, meta=KEY))

            async with anyio.create_task_group() as tg:
                tg.start_soon(first)
                await inside.wait()
                results.append(await client.call_tool("transfer", {"amount": 5}, meta=KEY))
                release.set()
        return results

    busy, done = anyio.run(main)
    assert busy.is_error
    assert (busy.meta or {})["io.call4agents/outcome"]["outcome"] == "in_progress"
    assert not done.is_error
    by_outcome = {attrs(s)["call4agents.outcome"]: s for s in telemetry.spans()}
    assert sorted(by_outcome) == ["in_progress", "ok"]
    a = attrs(by_outcome["in_progress"])
    assert a["error.type"] == "EffectInProgress"
    assert a["gen_ai.tool.call.id"] == request_ids[1]  # the retry's own request
    assert by_outcome["in_progress"].status.status_code is StatusCode.ERROR


KEY = {KEY_META: "k-1"}


@pytest.mark.parametrize("ending", ["escalated", "step_limit"])
def test_a_runs_ending_is_marked_and_counted(
    target: Target, telemetry: Telemetry, ending: str
) -> None:
    budget = c4a.Budget(max_tool_calls=1) if ending == "step_limit" else None
    once = OnceOnly(ledger=target.open(), identity=lambda ctx: "job-otel", budget=budget)

    def refund(amount: int) -> str:
        if budget is None:
            c4a.escalate("refunds need a person")
        return f"refunded {amount}"

    app, _ = server(once, refund)

    async def main() -> list[CallToolResult]:
        async with Client(app) as client:
            calls = [("refund", {"amount": 5}), ("refund", {"amount": 6})]
            return [
                await client.call_tool(name, args, meta={KEY_META: f"k-{args['amount']}"})
                for name, args in calls[: 2 if budget else 1]
            ]

    results = anyio.run(main)
    assert results[-1].is_error
    marked = telemetry.spans()[-1]  # the action whose call ended the run
    assert attrs(marked)["call4agents.run.terminal_reason"] == ending
    assert attrs(marked)["call4agents.run.id"] == RUN
    [ended] = telemetry.points("call4agents.runs.ended")
    assert dict(ended.attributes) == {"call4agents.run.terminal_reason": ending}
    assert ended.value == 1


def test_no_arguments_or_results_on_spans_by_default(target: Target, telemetry: Telemetry) -> None:
    def send_email(to: str) -> dict[str, Any]:
        return {"id": "msg-1", "to": to}

    app, _ = server(OnceOnly(ledger=target.open(), identity=lambda ctx: "job-otel"), send_email)
    call_twice(app, "send_email", {"to": "bob@example.com"})
    spans = telemetry.spans()
    assert [attrs(s)["call4agents.outcome"] for s in spans] == ["ok", "deduped"]
    for span in spans:
        assert not {"gen_ai.tool.call.arguments", "gen_ai.tool.call.result"} & set(attrs(span))
        assert "bob@example.com" not in repr(attrs(span))


def test_arguments_and_results_when_opted_in(
    target: Target, telemetry_with_args: Telemetry
) -> None:
    def send_email(to: str) -> dict[str, Any]:
        return {"id": "msg-1", "to": to}

    app, _ = server(OnceOnly(ledger=target.open(), identity=lambda ctx: "job-otel"), send_email)
    call_twice(app, "send_email", {"to": "bob@example.com"})
    first, _ = telemetry_with_args.spans()
    assert attrs(first)["gen_ai.tool.call.arguments"] == '{"to":"bob@example.com"}'
    assert '"id":"msg-1"' in attrs(first)["gen_ai.tool.call.result"]
