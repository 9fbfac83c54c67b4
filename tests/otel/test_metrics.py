"""Counters by tool and outcome (dedup hits among them), irreversible runs, latency, gauges."""

from __future__ import annotations

import time
from typing import Any

import pytest

import call4agents as c4a
from call4agents.controls.stats import compute, open_figures
from tests.conftest import Target
from tests.otel.conftest import Telemetry, backdate, held_in_progress


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
    # A run that left normally completed (no run control ended it).
    assert runs["agent run plain"].attributes["call4agents.run.terminal_reason"] == "completed"
    events = [e for e in runs["agent run escalate"].events if e.name == "call4agents.run.ended"]
    assert len(events) == 1
    assert events[0].attributes["call4agents.run.id"] == "r-esc"
    # The refused action's own span says which call hit the limit.
    refused = [s for s in telemetry.spans() if s.attributes.get("call4agents.run.terminal_reason")]
    assert [s.name for s in refused] == ["execute_tool pay"]

    ended = telemetry.points("call4agents.runs.ended")
    assert value(ended, call4agents__run__terminal_reason="step_limit") == 1  # counted once
    assert value(ended, call4agents__run__terminal_reason="escalated") == 1


def test_action_counter_for_every_failing_outcome_and_the_tools_latency(
    ledger: c4a.Ledger, telemetry: Telemetry
) -> None:
    @c4a.effect(name="charge")
    def charge(amount: int) -> str:
        time.sleep(0.05)
        raise ValueError("card declined")

    @c4a.effect(name="post")
    def post(text: str) -> str:
        raise c4a.OutcomeUnknown("connection reset after sending")

    @c4a.effect(name="refund", approval=True)
    def refund(order: str) -> str:
        return "re"

    with held_in_progress() as slow, c4a.run("r"):
        with pytest.raises(c4a.EffectInProgress):
            slow(1)
        with pytest.raises(ValueError):
            charge(5)
        with pytest.raises(c4a.OutcomeUnknown):
            post("hi")
        with pytest.raises(c4a.ApprovalRequired) as asked:
            refund("o-1")
        ledger.deny(asked.value.request.ticket, by="ann", reason="duplicate")
        with pytest.raises(c4a.ApprovalDenied):
            refund("o-1")

    actions = telemetry.points("call4agents.actions")
    counted = {
        (dict(p.attributes)["gen_ai.tool.name"], dict(p.attributes)["call4agents.outcome"]): p.value
        for p in actions
    }
    assert counted == {
        ("slow", "in_progress"): 1,
        ("slow", "ok"): 1,
        ("charge", "error"): 1,
        ("post", "in_doubt"): 1,
        ("refund", "approval_required"): 1,
        ("refund", "denied"): 1,
    }
    assert {dict(p.attributes)["call4agents.side_effect"] for p in actions} == {"write"}
    # The tool's own latency: at least its sleep, and within the action's duration.
    [span] = [s for s in telemetry.spans() if s.name == "execute_tool charge"]
    inside_tool = dict(span.attributes or {})["call4agents.tool.duration"]
    assert 0.05 <= inside_tool < 30
    [latency] = by_attrs(
        telemetry.points("call4agents.action.duration"),
        gen_ai__tool__name="charge",
        call4agents__outcome="error",
    )
    assert latency.count == 1
    assert latency.sum >= inside_tool
    assert latency.min >= 0.05


def test_age_gauges_against_known_ages(ledger: c4a.Ledger, telemetry: Telemetry) -> None:
    """An action in doubt for 10 minutes and a ticket waiting for 15: the gauges say so."""

    @c4a.effect(name="post")
    def post(text: str) -> str:
        raise c4a.OutcomeUnknown("connection reset after sending")

    @c4a.effect(name="refund", approval=True)
    def refund(order: str) -> str:
        return "re"

    with c4a.run("r"):
        with pytest.raises(c4a.OutcomeUnknown):
            post("hi")
        with pytest.raises(c4a.ApprovalRequired):
            refund("o-1")
    backdate(ledger, in_doubt_for=600, waiting_for=900)
    [doubt] = telemetry.points("call4agents.in_doubt.open")
    assert doubt.value == 1
    [age] = telemetry.points("call4agents.approvals.oldest_age")
    assert 900 <= age.value < 960  # 15 minutes, plus the moments since the rows were written
    opened = open_figures(ledger)
    assert opened.in_doubt_oldest_age is not None
    assert 600 <= opened.in_doubt_oldest_age < 660


def test_irreversible_executions_agree_with_stats(ledger: c4a.Ledger, telemetry: Telemetry) -> None:
    """Every call of an irreversible tool counts, whatever came of it; repeats and refusals don't.

    The metric (this process's calls) and ``stats`` (the ledger's attempts) on the same ledger.
    """
    attempts: list[int] = []

    @c4a.effect(name="wire", kind="irreversible")
    def wire(amount: int) -> str:
        attempts.append(amount)
        if amount == 2 and attempts.count(2) == 1:
            raise ValueError("account locked")  # did not act: the retry runs it again
        if amount == 3:
            raise TimeoutError("the bank did not answer")  # may have acted: in doubt
        return "sent"

    @c4a.effect(name="big_wire", kind="irreversible", approval=True)
    def big_wire(amount: int) -> str:
        return "sent"

    @c4a.effect(name="notify")
    def notify(to: str) -> str:
        return "ok"

    with c4a.run("r1"):
        wire(1)
        wire(1)  # a repeat: served from the record
        with pytest.raises(ValueError):
            wire(2)
        wire(2)  # attempt 2
        notify("ann")
    with c4a.run("r2"):
        with pytest.raises(TimeoutError):
            wire(3)
        with pytest.raises(c4a.EffectInDoubt):
            wire(3)  # refused: never run again blindly
        with pytest.raises(c4a.ApprovalRequired):
            big_wire(10**6)  # waits for a person: nothing ran
    assert len(attempts) == 4

    counted = telemetry.points("call4agents.irreversible.executions")
    assert value(counted, gen_ai__tool__name="wire") == 4
    assert by_attrs(counted, gen_ai__tool__name="big_wire") == []
    found = compute(ledger)
    assert found.irreversible_executions == 4
    assert found.irreversible_per_run == {"r1": 3, "r2": 1}
