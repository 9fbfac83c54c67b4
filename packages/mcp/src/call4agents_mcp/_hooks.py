"""``undo=``, ``find_existing=`` and ``check=`` for MCP tools, in the tool's own terms.

What the ledger records for a ``tools/call`` is the ``CallToolResult`` the server sent, because
that is what a retry must get back. The hooks a user writes speak of what the tool itself
returned, as ``@c4a.effect``'s hooks do, so they are adapted here:

- an undo gets the tool's value: the result's ``structuredContent`` (unwrapped from the
  ``{"result": ...}`` the SDK puts around a value that is not an object), else its text;
- what a finder finds (and a reconciler's ``Happened(result)``) is recorded as the
  ``CallToolResult`` the tool would have sent for it, so a retry gets a well-formed answer.

A synchronous finder runs in a worker thread: it searches an outside system, and the server's
event loop must keep serving other requests meanwhile.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import json
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from typing import Any

import anyio.to_thread
from pydantic import BaseModel
from pydantic_core import to_jsonable_python

from call4agents import EffectOptions
from call4agents.integration import check_recording_as, undo_on_value

_RESULT_FIELDS = frozenset({"content", "structuredContent", "isError", "_meta", "resultType"})
_HOOKS = ("undo", "find_existing", "check")

# Set by the server around one call: a finder that finds the resource says so here, so the
# client is told the tool did not run because what it makes already exists.
found_now: ContextVar[list[bool] | None] = ContextVar("c4a_mcp_found_now", default=None)


def for_tool_calls(options: EffectOptions) -> EffectOptions:
    """``options`` with its hooks adapted to results recorded as ``CallToolResult`` dicts."""
    changes: dict[str, Any] = {}
    if options.undo is not None:
        changes["undo"] = undo_on_value(options.undo, tool_value)
    if options.find_existing is not None:
        changes["find_existing"] = _found_as_result(options.find_existing)
    if options.check is not None:  # given, or made from the finder by EffectOptions
        changes["check"] = check_recording_as(options.check, as_tool_result)
    return dataclasses.replace(options, **changes) if changes else options


def fields_for_tool_calls(fields: Mapping[str, Any]) -> dict[str, Any]:
    """The same for per-tool options given as a dict of ``EffectOptions`` fields."""
    adapted = dict(fields)
    if adapted.get("undo") is not None:
        adapted["undo"] = undo_on_value(adapted["undo"], tool_value)
    if adapted.get("find_existing") is not None:
        adapted["find_existing"] = _found_as_result(adapted["find_existing"])
        # The check is made from this tool's finder, not inherited from the default's.
        adapted.setdefault("check", None)
    if adapted.get("check") is not None:
        adapted["check"] = check_recording_as(adapted["check"], as_tool_result)
    return adapted


def has_hooks(fields: Mapping[str, Any]) -> bool:
    return any(fields.get(name) is not None for name in _HOOKS)


def is_tool_result(value: Any) -> bool:
    """True for a ``CallToolResult`` as a dict (what the ledger keeps for a tools/call)."""
    return (
        isinstance(value, Mapping)
        and isinstance(value.get("content"), list)
        and all(isinstance(k, str) and k in _RESULT_FIELDS for k in value)
    )


def as_tool_result(value: Any) -> dict[str, Any]:
    """A found resource as the ``CallToolResult`` a run of the tool would have sent."""
    if isinstance(value, BaseModel) and {"content", "is_error"} <= set(type(value).model_fields):
        dumped: dict[str, Any] = value.model_dump(by_alias=True, mode="json", exclude_none=True)
        return dumped
    if is_tool_result(value):
        return dict(value)
    plain = to_jsonable_python(value)
    text = plain if isinstance(plain, str) else json.dumps(plain, ensure_ascii=False)
    return {
        "content": [{"type": "text", "text": text}],
        "structuredContent": plain if isinstance(plain, dict) else {"result": plain},
        "isError": False,
    }


def tool_value(result: Any) -> Any:
    """What the tool returned, from the ``CallToolResult`` dict the ledger recorded."""
    if not is_tool_result(result):
        return result
    structured = result.get("structuredContent")
    if isinstance(structured, dict):
        # The SDK wraps a value that is not an object (a str, a list) as {"result": value}.
        return structured["result"] if set(structured) == {"result"} else structured
    texts = [b.get("text") for b in result["content"] if isinstance(b, Mapping)]
    text = next((t for t in texts if isinstance(t, str)), None)
    if text is not None and text[:1] in ("{", "["):
        try:
            return json.loads(text)
        except ValueError:
            return text
    return text


def _found_as_result(finder: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(finder)
    async def adapted(**arguments: Any) -> Any:
        if inspect.iscoroutinefunction(finder):
            found = await finder(**arguments)
        else:
            # In a worker thread, with this context: c4a.key_marker() works there too.
            found = await anyio.to_thread.run_sync(functools.partial(finder, **arguments))
            if inspect.isawaitable(found):
                found = await found
        if found is None:
            return None
        hits = found_now.get()
        if hits is not None:
            hits.append(True)
        return as_tool_result(found)

    return adapted
