"""The run as a whole: its trigger (retry set by the ledger), time, cost, escalation reason, and
the "claims vs evidence" flag on a run that completed without a read tool."""

from __future__ import annotations

import pytest
from opentelemetry import trace

import call4agents as c4a
from call4agents.engine.run_notes import run_text
from call4agents.storage import run_rows
from tests.conftest import Target
from tests.otel.conftest import Telemetry


def _tools() -> tuple[c4a.Effect[..., str], c4a.Effect[..., str]]:
    @c4a.effect(name="send")
    def send(to: str) -> str:
        return f"sent {to}"

    @c4a.effect(name="lookup", kind="read")
    def lookup(order: str) -> str:
        return f"order {order}"

    return send, lookup


def _run_span(telemetry: Telemetry, name: str) -> dict[str, object]:
    found = [s for s in telemetry.exporter.get_finished_spans() if s.name == name]
    assert len(found) == 1
    return dict(found[0].attributes or {})


def test_trigger_and_retry_on_the_span_and_in_the_ledger(
    target: Target, telemetry: Telemetry
) -> None:
    ledger = c4a.init(target.open())
    send, lookup = _tools()
    tracer = telemetry.tracer_provider.get_tracer("app")
    with tracer.start_as_current_span("first"), c4a.run("t-1", trigger="webhook"):
        lookup("o-1")
        send("bob")
    first = _run_span(telemetry, "first")
    assert first["call4agents.run.trigger"] == "webhook"
    assert first["call4agents.run.terminal_reason"] == "completed"
    assert first["call4agents.run.without_read"] is False
    assert first["call4agents.run.tool_calls"] == 2
    assert isinstance(first["call4agents.budget.wall_clock_ms"], float)
    # Entered again after it recorded an action: the ledger says it is a retry.
    with tracer.start_as_current_span("again"), c4a.run("t-1", trigger="webhook"):
        send("bob")
    again = _run_span(telemetry, "again")
    assert again["call4agents.run.trigger"] == "retry"
    assert float(again["call4agents.budget.wall_clock_ms"]) >= float(  # type: ignore[arg-type]
        first["call4agents.budget.wall_clock_ms"]  # type: ignore[arg-type]
    )
    assert run_rows.triggers(ledger.store, "t-1") == ["webhook", "retry"]
    text = run_text(ledger, "t-1")
    assert text is not None
    assert "trigger webhook then retry" in text


def test_a_trigger_outside_the_list_is_one_clear_error() -> None:
    with pytest.raises(
        c4a.ConfigurationError, match=r"trigger='cron'\) is not a known trigger: use one of 'user'"
    ):
        c4a.run("t-2", trigger="cron")  # type: ignore[arg-type]


def test_completed_without_a_read_is_flagged(target: Target, telemetry: Telemetry) -> None:
    ledger = c4a.init(target.open())
    send, _ = _tools()
    tracer = telemetry.tracer_provider.get_tracer("app")
    with tracer.start_as_current_span("claims"), c4a.run("t-3"):
        send("carol")
    attrs = _run_span(telemetry, "claims")
    assert attrs["call4agents.run.without_read"] is True
    assert "call4agents.run.trigger" not in attrs  # none given, and not a retry
    flagged = telemetry.points("call4agents.runs.completed_without_read")
    assert sum(p.value for p in flagged) == 1
    ended = telemetry.points("call4agents.runs.ended")
    assert {dict(p.attributes)["call4agents.run.terminal_reason"] for p in ended} == {"completed"}
    text = run_text(ledger, "t-3")
    assert text is not None
    assert "WITHOUT ANY READ" in text


def test_escalation_reason_and_cost_on_the_run(target: Target, telemetry: Telemetry) -> None:
    c4a.init(target.open())
    tracer = telemetry.tracer_provider.get_tracer("app")
    budget = c4a.Budget(max_cost=10.0)

    def escalating() -> None:
        with tracer.start_as_current_span("escalating"), c4a.run("t-4", budget=budget):
            c4a.record_model_usage(100, 20, cost=0.25)
            c4a.escalate("low confidence", what_remains="answer the customer")

    with pytest.raises(c4a.Escalated):
        escalating()
    attrs = _run_span(telemetry, "escalating")
    assert attrs["call4agents.escalation.reason"] == "low confidence"
    assert attrs["call4agents.run.terminal_reason"] == "escalated"
    assert attrs["call4agents.budget.cost_spent"] == 0.25
    assert "call4agents.run.without_read" not in attrs  # not completed
    costs = telemetry.points("call4agents.run.cost")
    assert [p.sum for p in costs] == [0.25]


def test_an_error_ends_the_run_as_error_and_a_nested_block_does_not_end_it(
    target: Target, telemetry: Telemetry
) -> None:
    c4a.init(target.open())
    send, lookup = _tools()
    tracer = telemetry.tracer_provider.get_tracer("app")

    def crashing() -> None:
        with tracer.start_as_current_span("outer"), c4a.run("t-5"):
            with c4a.run("t-5"):  # the same run again inside: one run, counted once
                lookup("o")
            send("dan")
            raise ValueError("the agent crashed")

    with pytest.raises(ValueError, match="crashed"):
        crashing()
    attrs = _run_span(telemetry, "outer")
    assert attrs["call4agents.run.terminal_reason"] == "error"
    assert attrs["call4agents.run.tool_calls"] == 2
    ended = telemetry.points("call4agents.runs.ended")
    assert sum(p.value for p in ended) == 1
    assert trace.get_current_span() is trace.INVALID_SPAN


def test_gc_and_delete_run_forget_the_runs_summary(target: Target, telemetry: Telemetry) -> None:
    ledger = c4a.init(target.open())
    send, _ = _tools()
    for run_id in ("t-6", "t-7"):
        with c4a.run(run_id, trigger="schedule"):
            send(run_id)
    assert run_text(ledger, "t-6") is not None
    ledger.delete_run("t-6")
    assert run_text(ledger, "t-6") is None
    ledger.gc(0)  # every run was entered before now
    assert run_text(ledger, "t-7") is None
