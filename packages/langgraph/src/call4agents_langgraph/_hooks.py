"""``undo=``, ``find_existing=`` and ``check=`` for LangChain tools, in the tool's own terms.

A tool call's recorded result is the ``ToolMessage`` (or ``Command``) LangGraph made of what the
tool returned, because that is what a repeat must hand back. The hooks a user writes speak of
what the tool itself returns, as ``@c4a.effect``'s hooks do, so they are adapted here:

- an undo gets the tool's value back: the message's ``artifact`` if it has one, else its content,
  parsed back from JSON when LangGraph wrote a dict or list as JSON;
- what a finder finds (and a reconciler's ``Happened(result)``) is recorded as the ToolMessage
  LangGraph would have made of it, with the found value as its artifact.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

from langchain_core.messages import ToolMessage
from langgraph.prebuilt.tool_node import msg_content_output
from langgraph.types import Command

from call4agents import EffectOptions
from call4agents.integration import (
    check_recording_as,
    register_tool_payload,
    undo_on_value,
    when_done,
)

# The tool call being run, for the message a finder's result becomes (a repeat retargets it).
current_call_id: ContextVar[str] = ContextVar("call4agents_langgraph_call_id", default="")


def for_tool_calls(options: EffectOptions) -> EffectOptions:
    """``options`` with its hooks adapted to results recorded as ToolMessages."""
    changes: dict[str, Any] = {}
    tool = options.name or ""
    if options.undo is not None:
        changes["undo"] = undo_on_value(options.undo, tool_value)  # under the tool's name
    if options.find_existing is not None:
        changes["find_existing"] = _found_as_message(tool, options.find_existing)
    if options.check is not None:  # given, or made from the finder by EffectOptions
        changes["check"] = check_recording_as(options.check, functools.partial(as_message, tool))
    return dataclasses.replace(options, **changes) if changes else options


def tool_value(result: Any) -> Any:
    """What the tool returned, from the ToolMessage LangGraph made of it."""
    if not isinstance(result, ToolMessage):
        return result
    if result.artifact is not None:
        return result.artifact
    content = result.content
    if isinstance(content, str) and content[:1] in ("{", "["):
        try:
            return json.loads(content)
        except ValueError:
            return content
    return content


def as_message(tool: str, value: Any) -> Any:
    """A found resource as the ToolMessage a run of the tool would have produced."""
    if isinstance(value, (ToolMessage, Command)):
        return value
    content: Any = msg_content_output(value)
    return ToolMessage(
        content=content,
        artifact=value,
        name=tool,
        tool_call_id=current_call_id.get(),
    )


def _found_as_message(tool: str, finder: Callable[..., Any]) -> Callable[..., Any]:
    def record(found: Any) -> Any:
        return None if found is None else as_message(tool, found)

    @functools.wraps(finder)
    def adapted(**arguments: Any) -> Any:
        return when_done(finder(**arguments), record)

    return adapted


register_tool_payload(ToolMessage, tool_value)  # spans and hand-offs see the tool's own value
