"""One execute_tool span per action, with the GenAI and call4agents attributes, for each outcome."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.trace import StatusCode

import call4agents as c4a
from tests.conftest import Target, run_child
from tests.otel.conftest import Telemetry, held_in_progress

KEYS = ("gen_ai.operation.name", "gen_ai.tool.name", "call4agents.run.id")


class Counted:
    """A side effect counted in a file outside the ledger."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def hit(self) -> int:
        n = self.count() + 1
        self.path.write_text(str(n))
        return n

    def count(self) -> int:
        return int(self.path.read_text()) if self.path.exists() else 0


@pytest.fixture
def ledger(target: Target) -> c4a.Ledger:
    ledger = c4a.init(target.open())
    return ledger


@pytest.fixture
def world(tmp_path: Path) -> Counted:
    return Counted(tmp_path / "world.txt")


def attrs(span: Any) -> dict[str, Any]:
    return dict(span.attributes or {})


def test_ok_then_deduped(ledger: c4a.Ledger, telemetry: Telemetry, world: Counted) -> None:
    @c4a.effect(name="send_email")
    def send_email(to: str) -> dict[str, Any]:
        world.hit()
        return {"id": "msg-1", "to": to}

    with c4a.run("ticket-1"):
        send_email("bob@example.com")
        send_email("bob@example.com")
    assert world.count() == 1
    first, second = telemetry.spans()
    assert first.name == "execute_tool send_email"
    a = attrs(first)
    [record] = ledger.effects("ticket-1")
    assert a["gen_ai.operation.name"] == "execute_tool"
    assert a["gen_ai.tool.name"] == "send_email"
    assert a["call4agents.run.id"] == "ticket-1"
    assert a["call4agents.side_effect"] == "write"
    assert a["call4agents.action.key"] == record.key
    assert a["call4agents.idempotency_key"] == record.idempotency_key
    assert a["call4agents.attempt"] == 1
    assert a["call4agents.outcome"] == "ok"
    assert a["call4agents.external_id"] == "msg-1"
    assert "gen_ai.tool.call.id" not in a  # plain Python has no framework call id
    assert "gen_ai.tool.call.arguments" not in a
    assert "gen_ai.tool.call.result" not in a
    assert first.status.status_code is StatusCode.UNSET
    b = attrs(second)
    assert b["call4agents.outcome"] == "deduped"
    assert "call4agents.attempt" not in b  # nothing was attempted
    assert b["call4agents.external_id"] == "msg-1"


def test_call_id_when_known(ledger: c4a.Ledger, telemetry: Telemetry) -> None:
    @c4a.effect(name="open_ticket", scope="call")
    def open_ticket(title: str) -> str:
        return "T-1"

    with c4a.run("r"), c4a.tool_call("call_abc"):
        open_ticket("printer")
    [span] = telemetry.spans()
    assert attrs(span)["gen_ai.tool.call.id"] == "call_abc"


def test_error_then_retry(ledger: c4a.Ledger, telemetry: Telemetry, world: Counted) -> None:
    @c4a.effect(name="charge")
    def charge(amount: int) -> str:
        if world.hit() == 1:
            raise ValueError("card declined for 4111 1111")
        return "ch_2"

    with c4a.run("r"):
        with pytest.raises(ValueError):
            charge(5)
        charge(5)
    failed, retried = telemetry.spans()
    a = attrs(failed)
    assert a["call4agents.outcome"] == "error"
    assert a["error.type"] == "ValueError"
    assert a["call4agents.attempt"] == 1
    assert failed.status.status_code is StatusCode.ERROR
    assert not failed.events  # no exception event: its message may hold personal data
    assert attrs(retried)["call4agents.outcome"] == "ok"
    assert attrs(retried)["call4agents.attempt"] == 2


def test_timeout_then_in_doubt(ledger: c4a.Ledger, telemetry: Telemetry, world: Counted) -> None:
    @c4a.effect(name="wire")
    def wire(amount: int) -> str:
        world.hit()
        raise TimeoutError("bank did not answer")

    with c4a.run("r"):
        with pytest.raises(TimeoutError):
            wire(100)
        with pytest.raises(c4a.EffectInDoubt):
            wire(100)
    assert world.count() == 1
    timed_out, doubt = telemetry.spans()
    assert attrs(timed_out)["call4agents.outcome"] == "timeout"
    assert attrs(timed_out)["error.type"] == "TimeoutError"
    assert attrs(doubt)["call4agents.outcome"] == "in_doubt"
    assert attrs(doubt)["error.type"] == "EffectInDoubt"
    assert attrs(doubt)["call4agents.attempt"] == 1
    assert doubt.status.status_code is StatusCode.ERROR


def test_outcome_unknown_is_in_doubt(ledger: c4a.Ledger, telemetry: Telemetry) -> None:
    @c4a.effect(name="post")
    def post(text: str) -> str:
        raise c4a.OutcomeUnknown("connection reset after sending")

    with c4a.run("r"), pytest.raises(c4a.OutcomeUnknown):
        post("hi")
    [span] = telemetry.spans()
    assert attrs(span)["call4agents.outcome"] == "in_doubt"


def test_in_progress(ledger: c4a.Ledger, telemetry: Telemetry) -> None:
    with held_in_progress() as slow, c4a.run("r"), pytest.raises(c4a.EffectInProgress):
        slow(1)
    outcomes = sorted(attrs(s)["call4agents.outcome"] for s in telemetry.spans())
    assert outcomes == ["in_progress", "ok"]


def test_approval_required_then_approved(ledger: c4a.Ledger, telemetry: Telemetry) -> None:
    @c4a.effect(name="refund", approval=True)
    def refund(order: str) -> dict[str, str]:
        return {"id": "re_1"}

    with c4a.run("r"):
        with pytest.raises(c4a.ApprovalRequired) as asked:
            refund("o-1")
        ticket = asked.value.request.ticket
        ledger.approve(ticket, by="ann")
        refund("o-1")
    waiting, done = telemetry.spans()
    assert attrs(waiting)["call4agents.outcome"] == "approval_required"
    assert attrs(waiting)["call4agents.approval.ticket"] == ticket
    assert waiting.status.status_code is StatusCode.UNSET  # a pause, not a failure
    a = attrs(done)
    assert a["call4agents.outcome"] == "ok"
    assert a["call4agents.approval.ticket"] == ticket
    assert a["call4agents.approval.decided_by"] == "ann"


def test_denied(ledger: c4a.Ledger, telemetry: Telemetry, world: Counted) -> None:
    @c4a.effect(name="refund", approval=True)
    def refund(order: str) -> str:
        world.hit()
        return "re_1"

    with c4a.run("r"):
        with pytest.raises(c4a.ApprovalRequired) as asked:
            refund("o-1")
        ledger.deny(asked.value.request.ticket, by="bob", reason="fraud")
        with pytest.raises(c4a.ApprovalDenied):
            refund("o-1")
    assert world.count() == 0
    denied = telemetry.spans()[-1]
    a = attrs(denied)
    assert a["call4agents.outcome"] == "denied"
    assert a["call4agents.approval.decided_by"] == "bob"
    assert a["call4agents.approval.ticket"] == asked.value.request.ticket


def test_nests_under_current_span(ledger: c4a.Ledger, telemetry: Telemetry) -> None:
    tracer = telemetry.tracer_provider.get_tracer("agent-framework")

    @c4a.effect(name="send_email")
    def send_email(to: str) -> str:
        with tracer.start_as_current_span("http POST"):  # what an HTTP client's span would be
            return "ok"

    with tracer.start_as_current_span("invoke_agent support") as parent, c4a.run("r"):
        send_email("bob@example.com")
    ours = {s.name: s for s in telemetry.exporter.get_finished_spans()}
    span = ours["execute_tool send_email"]
    assert span.parent is not None
    assert span.parent.span_id == parent.get_span_context().span_id
    assert span.context.trace_id == parent.get_span_context().trace_id
    inner = ours["http POST"]
    assert inner.parent is not None
    assert inner.parent.span_id == span.context.span_id


def test_async_effect_nests_and_records(ledger: c4a.Ledger, telemetry: Telemetry) -> None:
    tracer = telemetry.tracer_provider.get_tracer("agent-framework")

    @c4a.effect(name="asend")
    async def asend(to: str) -> dict[str, int]:
        await asyncio.sleep(0)
        return {"id": 7}

    async def main() -> None:
        with tracer.start_as_current_span("agent run"):
            async with c4a.run("r"):
                await asend("a")
                await asend("a")

    asyncio.run(main())
    first, second = telemetry.spans()
    assert attrs(first)["call4agents.outcome"] == "ok"
    assert attrs(first)["call4agents.external_id"] == "7"
    assert attrs(second)["call4agents.outcome"] == "deduped"
    parent = next(s for s in telemetry.exporter.get_finished_spans() if s.name == "agent run")
    assert first.parent is not None
    assert first.parent.span_id == parent.context.span_id


def test_arguments_only_when_opted_in(ledger: c4a.Ledger, telemetry_with_args: Telemetry) -> None:
    @c4a.effect(name="send_email", redact=("token",))
    def send_email(to: str, token: str) -> dict[str, str]:
        return {"id": "m-9"}

    with c4a.run("r"):
        send_email("bob@example.com", "s3cret-token")
    [span] = telemetry_with_args.spans()
    a = attrs(span)
    assert '"to":"bob@example.com"' in a["gen_ai.tool.call.arguments"]
    assert "s3cret-token" not in a["gen_ai.tool.call.arguments"]  # redacted values stay masked
    assert a["gen_ai.tool.call.result"] == '{"id":"m-9"}'


def test_read_tools_are_not_spanned(ledger: c4a.Ledger, telemetry: Telemetry) -> None:
    @c4a.effect(name="lookup", kind="read")
    def lookup(q: str) -> str:
        return q

    with c4a.run("r"):
        lookup("x")
    assert telemetry.spans() == []


@pytest.mark.parametrize(
    ("result", "found"),
    [
        ({"id": "re_1"}, "re_1"),
        ({"external_id": 42}, "42"),
        ({"id": True}, None),
        ("re_1", None),
        # An MCP CallToolResult as a server records it: the tool's value is structuredContent.
        ({"content": [], "structuredContent": {"id": "tk_9"}, "isError": False}, "tk_9"),
        ({"content": [], "structuredContent": {"result": {"id": "tk_8"}}}, "tk_8"),
        ({"content": [], "structuredContent": {"result": "plain"}}, None),
    ],
)
def test_external_id_of_a_result(result: object, found: str | None) -> None:
    from call4agents.engine.endings import external_ids
    from call4agents.engine.observe import external_id

    assert external_id(result) == found
    assert (external_ids(result).get("id") or external_ids(result).get("external_id")) == (
        None if found is None else (42 if found == "42" else found)
    )


def test_the_public_switch_records_arguments_only_when_on(target: Target) -> None:
    """``c4a.init(otel_record_args=True)``, with the SDK the application set up globally."""
    done = run_child(Path(__file__).with_name("record_args_child.py"), env=target.env())
    assert done.returncode == 0, done.stderr
    spans = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    by_run = {s["call4agents.run.id"]: s for s in spans}
    assert sorted(by_run) == ["default", "opted-in"]  # otel=False: no span at all
    default, opted_in = by_run["default"], by_run["opted-in"]
    assert "gen_ai.tool.call.arguments" not in default
    assert "gen_ai.tool.call.result" not in default
    assert "default@example.com" not in json.dumps(default)
    assert '"to":"opted-in@example.com"' in opted_in["gen_ai.tool.call.arguments"]
    assert "s3cret-token" not in opted_in["gen_ai.tool.call.arguments"]  # redacted stays masked
    assert opted_in["gen_ai.tool.call.result"] == '{"id":"msg-9"}'
