"""Shared pieces of the Agents SDK tests: scripted models, an outbox, tool outputs.

Every model here is the SDK's own ``agents.testing.ScriptedModel``; nothing reaches the network
and trace export is off.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agents import RunResult, RunResultStreaming, set_tracing_disabled
from agents.items import TResponseOutputItem
from agents.testing import ScriptedModel, assistant_message, function_call

set_tracing_disabled(True)

__all__ = ["Outbox", "assistant_message", "call", "outputs", "script"]


def script(*steps: Sequence[TResponseOutputItem]) -> ScriptedModel:
    """A model that answers each request with the next step."""
    return ScriptedModel([list(step) for step in steps])


def call(tool: str, call_id: str, **arguments: Any) -> TResponseOutputItem:
    return function_call(tool, arguments, call_id=call_id)


def outputs(result: RunResult | RunResultStreaming) -> list[str]:
    """The tool outputs the model saw, in order."""
    return [str(i.output) for i in result.new_items if i.type == "tool_call_output_item"]


class Outbox:
    """The outside world: one line per email, written outside the ledger."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def send(self, to: str, **extra: Any) -> int:
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps({"to": to, "pid": os.getpid(), **extra}) + "\n")
        return self.count()

    def lines(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        return [json.loads(line) for line in self.path.read_text(encoding="utf-8").splitlines()]

    def count(self) -> int:
        return len(self.lines())
