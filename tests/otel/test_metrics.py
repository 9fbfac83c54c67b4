"""Counters by tool and outcome (dedup hits among them), irreversible runs, latency, gauges."""

from __future__ import annotations

from typing import Any

import pytest

import call4agents as c4a
from tests.conftest import Target
from tests.otel.conftest import Telemetry


def by_attrs(points: list[Any], **wanted: str) -> list[Any]:
    return [
        p
        for p in points
        if all(dict(p.attributes).get(k.replace("__", ".")) == v for k, v in wanted.items())
    ]


def value(points: list[Any], **wanted: str) -> int:
    found = by_attrs(points, **wanted)
    return int(sum(p.value for p in found))


def test_counters_histogram_and_gauges(target: Target, telemetry: Telemetry) -> None:
    ledger = c4a.init(target.open())

    @c4a.effect(name="wire", kind="irreversible")
    def wire(amount: int) -> str:
        if amount < 0:
            raise TimeoutError("no answer")
        return "ok"

    @c4a.effect(name="refund", approval=True)
    def refund(order: str) -> str:
        return "re"

    with c4a.run("r1"):
        wire(1)
        wire(1)
        wire(1)
        wire(2)
        with pytest.raises(TimeoutError):
            wire(-1)
        with pytest.raises(c4a.ApprovalRequired):
            refund("o")

    actions = telemetry.points("call4agents.actions")
    tool = "gen_ai__tool__name"
    outcome = "call4agents__outcome"
    assert value(actions, **{tool: "wire", outcome: "ok"}) == 2
    assert value(actions, **{tool: "wire", outcome: "deduped"}) == 2
    assert value(actions, **{tool: "wire", outcome: "timeout"}) == 1
    assert value(actions, **{tool: "refund", outcome: "approval_required"}) == 1
    # The timed-out wire may have gone out: it counts as an execution of an irreversible tool.
    assert value(telemetry.points("call4agents.irreversible.executions"), **{tool: "wire"}) == 3
    [ok_latency] = by_attrs(
        telemetry.points("call4agents.action.duration"), **{tool: "wire", outcome: "ok"}
    )
    assert ok_latency.count == 2
    assert ok_latency.sum > 0
    [doubt] = telemetry.points("call4agents.in_doubt.open")
    assert doubt.value == 1
    assert dict(doubt.attributes)["call4agents.ledger"] == ledger.url
    [waiting] = telemetry.points("call4agents.approvals.waiting")
    assert waiting.value == 1
    [age] = telemetry.points("call4agents.approvals.oldest_age")
    assert age.value >= 0


def test_runs_carry_their_terminal_reason(ledger: c4a.Ledger, telemetry: Telemetry) -> None:
    tracer = telemetry.tracer_provider.get_tracer("agent")

    @c4a.effect(name="pay")
    def pay(amount: int) -> int:
        return amount

    def spend_two() -> None:
        with c4a.run("r-budget", budget=c4a.Budget(max_tool_calls=1)):
            pay(1)
            pay(2)

    with tracer.start_as_current_span("agent run budget"), pytest.raises(c4a.BudgetExceeded):
        spend_two()  # the cut leaves the run: the span around it carries the reason
    with (
        tracer.start_as_current_span("agent run escalate"),
        pytest.raises(c4a.Escalated),
        c4a.run("r-esc"),
    ):
        c4a.escalate("the customer wants a person")
    with tracer.start_as_current_span("agent run plain"), c4a.run("r-plain"):
        pay(3)

    runs = {s.name: s for s in telemetry.spans("agent run")}
    assert runs["agent run budget"].attributes["call4agents.run.terminal_reason"] == "step_limit"
    assert runs["agent run budget"].attributes["call4agents.run.id"] == "r-budget"
    assert runs["agent run escalate"].attributes["call4agents.run.terminal_reason"] == "escalated"
    assert "call4agents.run.terminal_reason" not in runs["agent run plain"].attributes
    events = [e for e in runs["agent run escalate"].events if e.name == "call4agents.run.ended"]
    assert len(events) == 1
    assert events[0].attributes["call4agents.run.id"] == "r-esc"
    # The refused action's own span says which call hit the limit.
    refused = [s for s in telemetry.spans() if s.attributes.get("call4agents.run.terminal_reason")]
    assert [s.name for s in refused] == ["execute_tool pay"]

    ended = telemetry.points("call4agents.runs.ended")
    assert value(ended, call4agents__run__terminal_reason="step_limit") == 1  # counted once
    assert value(ended, call4agents__run__terminal_reason="escalated") == 1
