"""The tool's own value in a recorded MCP result, for the core's spans and hand-offs.

Imports nothing from the MCP SDK: the core reads it through an entry point in processes that
never import the server (the CLI showing a run).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from call4agents.integration import NOT_AN_ENVELOPE


def tool_payload(result: Any) -> Any:
    """A recorded ``CallToolResult``'s ``structuredContent`` (which wraps a non-object value as
    ``{"result": value}``); ``NOT_AN_ENVELOPE`` for anything that is not one."""
    if not isinstance(result, Mapping) or not isinstance(result.get("content"), list):
        return NOT_AN_ENVELOPE
    inner = result.get("structuredContent")
    if not isinstance(inner, Mapping):
        return result
    return inner["result"] if set(inner) == {"result"} else inner
