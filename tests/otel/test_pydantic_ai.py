"""Inside a real Pydantic AI agent, our spans nest under Pydantic AI's own execute_tool spans.

Every outcome the integration produces (ok, deduped, error, in doubt, approval required, denied)
carries the model's ``tool_call_id`` as ``gen_ai.tool.call.id`` and is the child of the
framework's span of the same call, in the same trace. A run that a run control ended carries
its terminal reason on Pydantic AI's agent-run span.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode
from pydantic_ai import (
    Agent,
    DeferredToolRequests,
    DeferredToolResults,
    Tool,
    ToolDenied,
    capture_run_messages,
)
from pydantic_ai.models.instrumented import InstrumentationSettings

import call4agents as c4a
from call4agents.model import _semconv as sc
from call4agents_pydantic_ai import OnceOnly
from tests.conftest import Target
from tests.otel.conftest import Telemetry
from tests.pydantic_ai.scripted import Call, Outbox, returns_in, scripted

BOB = {"to": "bob@example.com", "body": "Your refund is on its way"}


def raising(kind: type[Exception] | None) -> contextlib.AbstractContextManager[Any]:
    return pytest.raises(kind) if kind is not None else contextlib.nullcontext()


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def instrumented(agent: Agent[Any, Any], telemetry: Telemetry) -> None:
    """Pydantic AI's own instrumentation, sending to the same in-memory exporter."""
    agent.instrument = InstrumentationSettings(tracer_provider=telemetry.tracer_provider)


def framework_parent(telemetry: Telemetry, ours: ReadableSpan) -> ReadableSpan:
    """Pydantic AI's span our span is a child of; it must be the same call's, same trace."""
    spans = {s.context.span_id: s for s in telemetry.exporter.get_finished_spans()}
    assert ours.parent is not None
    parent = spans[ours.parent.span_id]
    assert parent.instrumentation_scope is not None
    assert parent.instrumentation_scope.name == "pydantic-ai"
    assert parent.context.trace_id == ours.context.trace_id
    assert attrs(parent)["gen_ai.tool.call.id"] == attrs(ours)["gen_ai.tool.call.id"]
    return parent


def by_call(telemetry: Telemetry) -> dict[str, list[ReadableSpan]]:
    found: dict[str, list[ReadableSpan]] = {}
    for span in telemetry.ours():
        framework_parent(telemetry, span)
        found.setdefault(attrs(span)["gen_ai.tool.call.id"], []).append(span)
    return found


def emailing_agent(target: Target, telemetry: Telemetry, outbox: Outbox) -> Agent[None, str]:
    """An instrumented agent whose model asks once to email Bob, through OnceOnly."""
    agent: Agent[None, str] = Agent(
        scripted([("send_email", BOB, "call-1")]),
        capabilities=[OnceOnly(ledger=target.open())],
    )
    instrumented(agent, telemetry)

    @agent.tool_plain
    def send_email(to: str, body: str) -> str:
        """Email a customer."""
        return outbox.send(to, body)

    return agent


def test_span_nests_under_pydantic_ai_tool_span(
    target: Target, telemetry: Telemetry, tmp_path: Path
) -> None:
    outbox = Outbox(tmp_path / "outbox.jsonl")
    agent = emailing_agent(target, telemetry, outbox)
    result = agent.run_sync("Tell Bob", conversation_id="conv-7")
    assert json.loads(result.output) == [["send_email", "sent to bob@example.com", "success"]]
    assert returns_in(result.all_messages())
    [ours] = telemetry.ours()
    attributes = dict(ours.attributes or {})
    assert ours.name == "execute_tool send_email"
    assert attributes["gen_ai.tool.call.id"] == "call-1"
    assert attributes["call4agents.run.id"] == "conv-7"
    assert attributes["call4agents.outcome"] == "ok"
    spans = {s.context.span_id: s for s in telemetry.exporter.get_finished_spans()}
    assert ours.parent is not None
    framework = spans[ours.parent.span_id]
    assert framework.instrumentation_scope is not None
    assert framework.instrumentation_scope.name == "pydantic-ai"
    assert dict(framework.attributes or {})["gen_ai.tool.call.id"] == "call-1"
    assert outbox.sent() == ["bob@example.com"]


def test_ok_error_in_doubt_then_deduped_on_resume(
    target: Target, telemetry: Telemetry, tmp_path: Path
) -> None:
    outbox = Outbox(tmp_path / "outbox.jsonl")
    ledger = target.open()
    agent: Agent[None, str] = Agent(capabilities=[OnceOnly(ledger=ledger)])
    instrumented(agent, telemetry)

    @agent.tool_plain
    def send_email(to: str, body: str) -> dict[str, str]:
        """Email a customer."""
        outbox.send(to, body)
        return {"id": "msg-1"}

    @agent.tool_plain
    def sync_crm(customer: str) -> str:
        """Update the CRM."""
        raise ValueError("CRM rejected the record")  # did not act

    @agent.tool_plain
    def post_letter(to: str) -> str:
        """Post a letter."""
        raise c4a.OutcomeUnknown("the post office hung up")  # may have acted

    # Each call in a turn of its own: a tool's own error ends the run, as it would bare.
    deliveries: list[tuple[Call, type[Exception] | None, type[Exception] | None]] = [
        (("send_email", BOB, "call-ok"), None, None),
        (("sync_crm", {"customer": "bob"}, "call-error"), ValueError, ValueError),
        (("post_letter", {"to": "bob"}, "call-doubt"), c4a.OutcomeUnknown, None),
    ]
    for call, first_raises, again_raises in deliveries:
        model = scripted([call])
        with capture_run_messages() as messages, raising(first_raises):
            agent.run_sync("Tell Bob", model=model, conversation_id="conv-8")
        # The process died before the results were saved: resume from the model's tool call.
        with raising(again_raises):
            agent.run_sync(message_history=messages[:2], model=model)

    spans = by_call(telemetry)
    assert sorted(spans) == ["call-doubt", "call-error", "call-ok"]
    outcomes = {call: [attrs(s)["call4agents.outcome"] for s in got] for call, got in spans.items()}
    assert outcomes == {
        "call-ok": ["ok", "deduped"],  # the resume got the recorded result
        "call-error": ["error", "error"],  # it did not act, so it was tried again
        "call-doubt": ["in_doubt", "in_doubt"],  # never re-run blindly
    }
    ok, deduped = spans["call-ok"]
    assert attrs(ok)["call4agents.external_id"] == "msg-1"
    [record] = [r for r in ledger.effects("conv-8") if r.tool == "send_email"]
    assert attrs(ok)["call4agents.idempotency_key"] == record.idempotency_key
    assert attrs(ok)["call4agents.side_effect"] == "write"
    assert attrs(ok)["gen_ai.operation.name"] == "execute_tool"
    assert "call4agents.attempt" not in attrs(deduped)  # nothing ran
    error, retried = spans["call-error"]
    assert (attrs(error)["call4agents.attempt"], attrs(retried)["call4agents.attempt"]) == (1, 2)
    assert attrs(error)["error.type"] == "ValueError"
    assert error.status.status_code is StatusCode.ERROR
    doubt, refused = spans["call-doubt"]
    assert attrs(doubt)["error.type"] == "OutcomeUnknown"
    assert attrs(refused)["error.type"] == "EffectInDoubt"
    assert all(attrs(s)["call4agents.run.id"] == "conv-8" for s in telemetry.ours())
    assert outbox.sent() == ["bob@example.com"]


def test_approval_required_then_denied(
    target: Target, telemetry: Telemetry, tmp_path: Path
) -> None:
    ledger = target.open()
    outbox = Outbox(tmp_path / "outbox.jsonl")
    agent: Agent[None, Any] = Agent(
        scripted([("send_email", BOB, "call-1")], [("send_email", BOB, "call-2")]),
        output_type=[str, DeferredToolRequests],
        capabilities=[OnceOnly(ledger=ledger, tools={"send_email": {"approval": True}})],
    )
    instrumented(agent, telemetry)

    @agent.tool_plain
    def send_email(to: str, body: str) -> str:
        """Email a customer."""
        return outbox.send(to, body)

    asked = agent.run_sync("Tell Bob", conversation_id="conv-9")
    assert isinstance(asked.output, DeferredToolRequests)
    no = DeferredToolResults(
        approvals={"call-1": ToolDenied("Not before the audit")},
        metadata=asked.output.metadata,
        answered_by={"call-1": "ann"},
    )
    denied = agent.run_sync(message_history=asked.all_messages(), deferred_tool_results=no)
    # The model tries the same email again in a later turn: the ledger's "no" stands.
    agent.run_sync("Try again", message_history=denied.all_messages())

    spans = by_call(telemetry)
    [waiting] = spans["call-1"]  # a denied deferred call is never executed: no second span
    [refused] = spans["call-2"]
    assert attrs(waiting)["call4agents.outcome"] == "approval_required"
    assert waiting.status.status_code is StatusCode.UNSET  # a pause, not a failure
    [ticket] = ledger.approvals(run_id="conv-9")
    assert attrs(waiting)["call4agents.approval.ticket"] == ticket.ticket
    assert attrs(refused)["call4agents.outcome"] == "denied"
    assert attrs(refused)["call4agents.approval.decided_by"] == "ann"
    assert refused.status.status_code is StatusCode.ERROR
    assert outbox.sent() == []


def run_span(telemetry: Telemetry) -> ReadableSpan:
    [found] = [
        s
        for s in telemetry.exporter.get_finished_spans()
        if s.instrumentation_scope is not None
        and s.instrumentation_scope.name == "pydantic-ai"
        and s.parent is None
    ]
    return found


@pytest.mark.parametrize("ending", ["escalated", "step_limit"])
def test_the_agent_run_span_carries_the_runs_ending(
    target: Target, telemetry: Telemetry, tmp_path: Path, ending: str
) -> None:
    outbox = Outbox(tmp_path / "outbox.jsonl")
    calls = [("send_email", BOB, "call-1"), ("refund", {"amount": 500}, "call-2")]
    budget = c4a.Budget(max_tool_calls=1) if ending == "step_limit" else None
    agent: Agent[None, str] = Agent(
        scripted(calls), capabilities=[OnceOnly(ledger=target.open(), budget=budget)]
    )
    instrumented(agent, telemetry)

    @agent.tool_plain(sequential=True)  # in order: the email first, then the refund
    def send_email(to: str, body: str) -> dict[str, str]:
        """Email a customer."""
        outbox.send(to, body)
        return {"id": "msg-1"}

    @agent.tool_plain(sequential=True)
    def refund(amount: int) -> str:
        """Refund the customer."""
        c4a.escalate("refunds over 100 need a person")

    expected = c4a.Escalated if ending == "escalated" else c4a.BudgetExceeded
    with pytest.raises(expected):
        agent.run_sync("Tell Bob", conversation_id="conv-10")
    assert attrs(run_span(telemetry))[sc.RUN_TERMINAL_REASON] == ending
    spans = by_call(telemetry)
    assert attrs(spans["call-1"][0])["call4agents.outcome"] == "ok"
    assert attrs(spans["call-2"][0])["call4agents.outcome"] == "error"  # it did not act
    assert outbox.sent() == ["bob@example.com"]


NO_ARGS = ("gen_ai.tool.call.arguments", "gen_ai.tool.call.result")


def test_in_progress_while_another_worker_runs_the_call(
    target: Target, telemetry: Telemetry, tmp_path: Path
) -> None:
    """Two workers on one conversation: the second meets the first's call still running."""
    outbox = Outbox(tmp_path / "outbox.jsonl")
    inside, release = threading.Event(), threading.Event()

    def send_email(to: str, body: str) -> str:
        inside.set()
        assert release.wait(30)
        return outbox.send(to, body)

    def worker(wait: float) -> Agent[None, str]:
        once = OnceOnly(ledger=target.open(), default=c4a.EffectOptions(wait=wait))
        agent: Agent[None, str] = Agent(
            scripted([("send_email", BOB, "call-1")]),
            tools=[Tool(send_email, name="send_email")],
            capabilities=[once],
        )
        instrumented(agent, telemetry)
        return agent

    first = threading.Thread(
        target=worker(30).run_sync, args=("Tell Bob",), kwargs={"conversation_id": "conv-11"}
    )
    first.start()
    try:
        assert inside.wait(30)
        busy = worker(0).run_sync("Tell Bob", conversation_id="conv-11")
    finally:
        release.set()
        first.join(30)
    [[_, message, _]] = returns_in(busy.all_messages())
    assert "still running in another worker" in message
    in_progress, ok = sorted(by_call(telemetry)["call-1"], key=lambda s: s.end_time or 0)
    assert attrs(in_progress)["call4agents.outcome"] == "in_progress"
    assert attrs(in_progress)["error.type"] == "EffectInProgress"
    assert in_progress.status.status_code is StatusCode.ERROR
    assert attrs(ok)["call4agents.outcome"] == "ok"
    assert outbox.sent() == ["bob@example.com"]


@pytest.mark.parametrize("where", ["framework", "tool"])
def test_timeout_of_the_framework_or_of_the_tool(
    target: Target, telemetry: Telemetry, where: str
) -> None:
    """Pydantic AI's own ``timeout=`` and a TimeoutError of the tool's client: both "timeout"."""
    release = threading.Event()

    def charge(amount: int) -> str:
        if where == "tool":
            time.sleep(0.05)
            raise TimeoutError("the card service did not answer")
        release.wait(30)  # still running when Pydantic AI gives up on it
        return "charged"

    options = {"timeout": 0.05} if where == "framework" else {}
    agent: Agent[None, str] = Agent(
        scripted([("charge", {"amount": 5}, "call-1")]),
        tools=[Tool(charge, name="charge", **options)],
        capabilities=[OnceOnly(ledger=target.open())],
    )
    instrumented(agent, telemetry)
    # The framework's timeout is its own retry prompt, as bare; the tool's own error ends the run.
    try:
        with capture_run_messages() as messages, raising(TimeoutError if where == "tool" else None):
            agent.run_sync("Charge me", conversation_id="conv-12")
    finally:
        release.set()
    if where == "framework":
        [[_, message, _]] = returns_in(messages)
        assert message.startswith("Timed out")  # Pydantic AI's own words
    [span] = by_call(telemetry)["call-1"]
    a = attrs(span)
    assert a["call4agents.outcome"] == "timeout"
    assert span.status.status_code is StatusCode.ERROR
    assert 0.05 <= a["call4agents.tool.duration"] < 30
    [latency] = telemetry.points("call4agents.action.duration")
    assert dict(latency.attributes)["call4agents.outcome"] == "timeout"
    assert latency.sum >= a["call4agents.tool.duration"]


@pytest.mark.parametrize("record", [False, True], ids=["default", "opted_in"])
def test_arguments_and_results_only_when_opted_in(
    target: Target, tmp_path: Path, request: pytest.FixtureRequest, record: bool
) -> None:
    telemetry: Telemetry = request.getfixturevalue("telemetry_with_args" if record else "telemetry")
    outbox = Outbox(tmp_path / "outbox.jsonl")
    agent = emailing_agent(target, telemetry, outbox)
    agent.run_sync("Tell Bob", conversation_id="conv-13")
    [ours] = telemetry.ours()
    a = attrs(ours)
    if record:
        assert '"body":"Your refund is on its way"' in a["gen_ai.tool.call.arguments"]
        assert a["gen_ai.tool.call.result"] == '"sent to bob@example.com"'
    else:
        assert not set(NO_ARGS) & set(a)
        assert BOB["body"] not in repr(a)
