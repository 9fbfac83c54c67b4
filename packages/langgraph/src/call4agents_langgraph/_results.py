"""What a tool call hands LangGraph: the recorded result, retargeted, or an error message."""

from __future__ import annotations

from typing import Any

from langchain_core.messages import ToolMessage
from langgraph.types import Command

ToolResult = ToolMessage | Command[Any]

METADATA_KEY = "call4agents"
"""Key under ``ToolMessage.response_metadata`` that says what Call4Agents did with the call."""


class ToolReportedError(Exception):
    """The handler answered with ``ToolMessage(status="error")``: the tool reported a failure.

    Raised inside the ledgered call so the core records the attempt as failed (the tool did not
    act, so asking again may run it), then unwrapped so the model still gets the message.
    """

    def __init__(self, message: ToolMessage) -> None:
        self.message = message
        super().__init__(f"the tool answered with an error: {_text(message)[:500]}")


def _text(message: ToolMessage) -> str:
    content = message.content
    return content if isinstance(content, str) else str(content)


def check_reported_error(result: ToolResult) -> ToolResult:
    if isinstance(result, ToolMessage) and result.status == "error":
        raise ToolReportedError(result)
    return result


def error_message(tool_call: dict[str, Any] | Any, text: str, *, key: str | None) -> ToolMessage:
    """The ``ToolMessage(status="error")`` the model gets instead of a result."""
    message = ToolMessage(
        content=text,
        tool_call_id=tool_call["id"],
        name=tool_call["name"],
        status="error",
    )
    return _marked(message, outcome="refused", key=key)


def deliver(result: ToolResult, *, tool_call: Any, key: str, ran: bool) -> ToolResult:
    """Hand a result to LangGraph, retargeted at the current call when it is a replay.

    A replayed message gets no message id: the add_messages reducer replaces a message that has
    the id of one already in the state, and a replay must append, never overwrite history.
    """
    if ran:
        return _mark(result, outcome="ran", key=key)
    return _mark(_retarget(result, tool_call), outcome="deduped", key=key)


def _retarget(result: ToolResult, tool_call: Any) -> ToolResult:
    if isinstance(result, ToolMessage):
        return _retarget_message(result, tool_call)
    update = result.update
    if isinstance(update, dict) and isinstance(update.get("messages"), list):
        messages = [
            _retarget_message(m, tool_call) if isinstance(m, ToolMessage) else m
            for m in update["messages"]
        ]
        return Command(
            graph=result.graph,
            update={**update, "messages": messages},
            resume=result.resume,
            goto=result.goto,
        )
    return result


def _retarget_message(message: ToolMessage, tool_call: Any) -> ToolMessage:
    return message.model_copy(
        update={"tool_call_id": tool_call["id"], "name": tool_call["name"], "id": None}
    )


def _mark(result: ToolResult, *, outcome: str, key: str) -> ToolResult:
    if isinstance(result, ToolMessage):
        return _marked(result, outcome=outcome, key=key)
    return result


def _marked(message: ToolMessage, *, outcome: str, key: str | None) -> ToolMessage:
    note: dict[str, Any] = {"outcome": outcome}
    if key is not None:
        note["action"] = key
    metadata = {**message.response_metadata, METADATA_KEY: note}
    return message.model_copy(update={"response_metadata": metadata})
