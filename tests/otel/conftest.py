"""In-memory OpenTelemetry providers installed as Call4Agents' observer for one test (fixtures),
and known ages written into a ledger."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from sqlalchemy import update

import call4agents as c4a
from call4agents.controls.telemetry import configure
from call4agents.storage.tables import approvals, effects


@dataclass
class Telemetry:
    exporter: InMemorySpanExporter
    reader: InMemoryMetricReader
    tracer_provider: TracerProvider

    def spans(self, prefix: str = "execute_tool") -> list[ReadableSpan]:
        return [s for s in self.exporter.get_finished_spans() if s.name.startswith(prefix)]

    def ours(self) -> list[ReadableSpan]:
        """Action spans made by Call4Agents (not a framework's own, nor our step spans)."""
        return [
            s
            for s in self.exporter.get_finished_spans()
            if s.instrumentation_scope is not None
            and s.instrumentation_scope.name == "call4agents"
            and s.name != "call4agents.step"
        ]

    def points(self, name: str) -> list[Any]:
        data = self.reader.get_metrics_data()
        found = []
        for resource in data.resource_metrics if data else []:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    if metric.name == name:
                        found.extend(metric.data.data_points)
        return found


def install(record_args: bool = False) -> Iterator[Telemetry]:
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    configure(
        True,
        record_args=record_args,
        tracer_provider=tracer_provider,
        meter_provider=meter_provider,
    )
    try:
        yield Telemetry(exporter, reader, tracer_provider)
    finally:
        configure(None)  # back to the automatic default for the rest of the suite
        meter_provider.shutdown()


@pytest.fixture
def telemetry() -> Iterator[Telemetry]:
    yield from install()


@pytest.fixture
def telemetry_with_args() -> Iterator[Telemetry]:
    yield from install(record_args=True)


def backdate(ledger: c4a.Ledger, *, in_doubt_for: float, waiting_for: float) -> None:
    """Known ages, on the database's clock: the rows say they were written that long ago."""
    now = ledger.store.now()
    with ledger.store.tx() as conn:
        conn.execute(
            update(effects)
            .where(effects.c.state == "in_doubt")
            .values(updated_at=now - in_doubt_for)
        )
        conn.execute(
            update(approvals)
            .where(approvals.c.state == "pending")
            .values(requested_at=now - waiting_for)
        )


@contextlib.contextmanager
def held_in_progress() -> Iterator[c4a.Effect[..., int]]:
    """``slow(1)`` running in another thread's run ``"r"`` until the block ends: the block's own
    call of it in run ``"r"`` meets a live owner (``wait=0``: at once ``EffectInProgress``)."""
    inside, release = threading.Event(), threading.Event()

    @c4a.effect(name="slow", wait=0)
    def slow(n: int) -> int:
        inside.set()
        assert release.wait(30)
        return n

    def first() -> None:
        with c4a.run("r"):
            slow(1)

    worker = threading.Thread(target=first)
    worker.start()
    try:
        assert inside.wait(30)
        yield slow
    finally:
        release.set()
        worker.join(30)
