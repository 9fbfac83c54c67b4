"""Child: the public switch ``c4a.init(otel_record_args=...)`` with the application's global SDK.

Runs in its own interpreter because it sets the process-wide tracer provider. One action with
the default, one with arguments opted in, one with OpenTelemetry off; prints each span as JSON.
"""

from __future__ import annotations

import json
import os

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import call4agents as c4a

exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)
url, schema = os.environ["C4A_TEST_URL"], os.environ.get("C4A_TEST_SCHEMA") or None


@c4a.effect(name="send_email", redact=("token",))
def send_email(to: str, token: str) -> dict[str, str]:
    return {"id": "msg-9"}


for run_id, switches in (
    ("default", {}),
    ("opted-in", {"otel_record_args": True}),
    ("off", {"otel": False}),
):
    c4a.init(url, schema=schema, **switches)  # type: ignore[arg-type]
    with c4a.run(run_id):
        send_email(f"{run_id}@example.com", "s3cret-token")
for span in exporter.get_finished_spans():
    print(json.dumps(dict(span.attributes or {})))
