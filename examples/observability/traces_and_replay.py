"""Spans for every action, the ledger's health figures, and an incident replayed as a test.

    .venv/bin/python examples/observability/traces_and_replay.py

Offline: spans go to an in-memory exporter (use your own OTLP exporter in production) and the
ledger is ./.c4a/ledger.db in the current directory.
"""

from __future__ import annotations

import json
from pathlib import Path

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import call4agents as c4a
from call4agents.controls.replay import export_run
from call4agents.controls.stats import compute, render

# The application owns the SDK; Call4Agents only uses the OpenTelemetry API.
exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)

ledger = c4a.init()  # otel is on by default when opentelemetry is installed
sent: list[str] = []


@c4a.effect(name="send_email")
def send_email(to: str, body: str) -> dict[str, str]:
    sent.append(to)
    return {"id": f"msg-{len(sent)}"}


@c4a.effect(name="wire_money", kind="irreversible")
def wire_money(amount: int) -> str:
    raise TimeoutError("the bank did not answer")


tracer = trace.get_tracer("my-agent")
with tracer.start_as_current_span("invoke_agent support"), c4a.run("ticket-42"):
    send_email("bob@example.com", "Your refund is on its way")
    send_email("bob@example.com", "Your refund is on its way")  # a retry: deduplicated
    try:
        wire_money(500)
    except TimeoutError:
        print("wire_money timed out: it may have gone out, so it is now in doubt")

for span in exporter.get_finished_spans():
    if span.name.startswith("execute_tool"):
        attributes = span.attributes or {}
        parent = "under invoke_agent" if span.parent else "root"
        print(f"span {span.name}: {attributes['call4agents.outcome']} ({parent})")

print()
print(render(compute(ledger)))

# One incident becomes one regression test: export the run, replay it with no real call.
incident = Path("ticket-42.json")
incident.write_text(json.dumps(export_run(ledger, "ticket-42")))
before = len(sent)
with c4a.replay(incident), c4a.run("regression"):
    print()
    print("replayed:", send_email("bob@example.com", "Your refund is on its way"))
    try:
        wire_money(500)
    except c4a.EffectInDoubt:
        print("replayed: wire_money is in doubt, as recorded")
    try:
        send_email("alice@example.com", "Hello")
    except c4a.ReplayMismatch:
        print("replayed: a call the incident never made was refused")
print("real emails sent during the replay:", len(sent) - before)
