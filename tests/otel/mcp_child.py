"""Child: an MCP server with OnceOnly, the SDK's own OpenTelemetry spans on, a call and a retry.
The server says its runs come from a webhook.

Then a tool that escalates, which ends the run. Runs in its own interpreter because it sets the
process-wide tracer provider, which the MCP SDK reads. Prints every finished span as JSON lines.
"""

from __future__ import annotations

import json
import os
import sys

import anyio
from mcp import Client
from mcp.server.mcpserver import MCPServer
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import call4agents as c4a
from call4agents_mcp import KEY_META, OnceOnly

exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)

c4a.init(os.environ["C4A_TEST_URL"], schema=os.environ.get("C4A_TEST_SCHEMA") or None)
app = MCPServer("mail", middleware=[OnceOnly(trigger="webhook")])


@app.tool()
def send_email(to: str, body: str) -> str:
    return f"sent to {to}"


@app.tool()
def refund(amount: int) -> str:
    c4a.escalate("refunds need a person")


async def main() -> None:
    async with Client(app) as client:
        args = {"to": "bob@example.com", "body": "hello"}
        for _ in range(2):  # the second is a retry: answered from the ledger
            await client.call_tool("send_email", args, meta={KEY_META: "k-1"})
        await client.call_tool("refund", {"amount": 500}, meta={KEY_META: "r-1"})


anyio.run(main)
for span in exporter.get_finished_spans():
    scope = span.instrumentation_scope.name if span.instrumentation_scope else None
    print(
        json.dumps(
            {
                "name": span.name,
                "scope": scope,
                "span_id": span.context.span_id,
                "trace_id": span.context.trace_id,
                "parent_id": span.parent.span_id if span.parent else None,
                "attributes": dict(span.attributes or {}),
            }
        )
    )
sys.stdout.flush()
