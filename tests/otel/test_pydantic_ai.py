"""Inside a real Pydantic AI agent, our span nests under Pydantic AI's own execute_tool span."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic_ai import Agent
from pydantic_ai.models.instrumented import InstrumentationSettings

from call4agents_pydantic_ai import OnceOnly
from tests.conftest import Target
from tests.otel.conftest import Telemetry
from tests.pydantic_ai.scripted import Outbox, returns_in, scripted

BOB = {"to": "bob@example.com", "body": "Your refund is on its way"}


def test_span_nests_under_pydantic_ai_tool_span(
    target: Target, telemetry: Telemetry, tmp_path: Path
) -> None:
    outbox = Outbox(tmp_path / "outbox.jsonl")
    agent: Agent[None, str] = Agent(
        scripted([("send_email", BOB, "call-1")]),
        capabilities=[OnceOnly(ledger=target.open())],
    )
    # Pydantic AI's own instrumentation, sending to the same in-memory exporter.
    agent.instrument = InstrumentationSettings(tracer_provider=telemetry.tracer_provider)

    @agent.tool_plain
    def send_email(to: str, body: str) -> str:
        """Email a customer."""
        return outbox.send(to, body)

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
