"""A scripted Pydantic AI model and an outbox tool, shared by the tests and their children.

The model answers a user prompt with the tool calls it was given, and anything else (tool
results) with a final text listing each result as ``[tool, content, outcome]`` in JSON.
Emails go to an outbox file outside the ledger.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel

Call = tuple[str, dict[str, Any], str]  # tool name, arguments, tool_call_id
REPO = Path(__file__).parents[2]


def child_env(env: dict[str, str]) -> dict[str, str]:
    """A child's environment in which ``import tests.pydantic_ai.scripted`` works."""
    return dict(env, PYTHONPATH=str(REPO))


def scripted(*turns: Sequence[Call]) -> FunctionModel:
    """The n-th user prompt of a conversation gets the n-th list of calls."""

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if any(isinstance(p, UserPromptPart) for p in messages[-1].parts):
            prompts = sum(isinstance(p, UserPromptPart) for m in messages for p in m.parts)
            calls = turns[min(prompts, len(turns)) - 1]
            return ModelResponse(parts=[ToolCallPart(n, a, tool_call_id=i) for n, a, i in calls])
        return ModelResponse(parts=[TextPart(json.dumps(returns_in(messages[-1:])))])

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[Any]:
        for i, part in enumerate(respond(messages, info).parts):
            if isinstance(part, ToolCallPart):
                args = part.args_as_json_str()
                yield {i: DeltaToolCall(part.tool_name, args, tool_call_id=part.tool_call_id)}
            elif isinstance(part, TextPart):
                yield part.content

    return FunctionModel(respond, stream_function=stream)


def returns_in(messages: Sequence[ModelMessage]) -> list[list[Any]]:
    return [
        [p.tool_name, p.content, p.outcome]
        for m in messages
        for p in m.parts
        if isinstance(p, ToolReturnPart)
    ]


class Outbox:
    """The outside world: one JSON line per email sent."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def send(self, to: str, body: str) -> str:
        with self.path.open("a") as f:
            f.write(json.dumps({"to": to, "body": body}) + "\n")
        return f"sent to {to}"

    def sent(self) -> list[str]:
        if not self.path.exists():
            return []
        return [json.loads(line)["to"] for line in self.path.read_text().splitlines()]
