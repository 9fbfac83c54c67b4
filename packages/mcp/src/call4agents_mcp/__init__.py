"""Call4Agents for MCP: a retried ``tools/call`` gets the first result instead of a second run.

Server, one line::

    from mcp.server.mcpserver import MCPServer
    from call4agents_mcp import OnceOnly

    server = MCPServer("mail", middleware=[OnceOnly()])

Client: send a stable idempotency key in ``_meta`` with :func:`call_tool`, or plug
:func:`tool_meta_resolver` (Agents SDK) or :func:`process_tool_call` (Pydantic AI) into the
framework's MCP client. Warnings (a call that runs without the ledger) are
:class:`Call4AgentsWarning`, given once, and never turn a call into an error. :func:`ending_of`
reads a result that says the run ended (a budget cut, an escalation) as ``c4a.BudgetExceeded`` /
``c4a.Escalated``; ``call_tool`` raises it. What the ledger decided about a call travels in the
result's ``_meta[OUTCOME_META]``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from call4agents.integration import Call4AgentsWarning

    from ._endings import ending_of
    from ._keys import KEY_META, call_tool, idempotency_key, process_tool_call, tool_meta_resolver
    from ._outcomes import OUTCOME_META
    from ._server import OnceOnly

# Names load on first use, so a process that only decodes recorded results (the CLI, through
# the ``_payload`` entry point) does not import the MCP SDK.
_WHERE = {
    "Call4AgentsWarning": "call4agents.integration",
    "KEY_META": "._keys",
    "OUTCOME_META": "._outcomes",
    "OnceOnly": "._server",
    "call_tool": "._keys",
    "ending_of": "._endings",
    "idempotency_key": "._keys",
    "process_tool_call": "._keys",
    "tool_meta_resolver": "._keys",
}
__all__ = [
    "KEY_META",
    "OUTCOME_META",
    "Call4AgentsWarning",
    "OnceOnly",
    "call_tool",
    "ending_of",
    "idempotency_key",
    "process_tool_call",
    "tool_meta_resolver",
]


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module 'call4agents_mcp' has no attribute {name!r}")
    _check_environment()
    value = getattr(importlib.import_module(where, None if where[0] != "." else __name__), name)
    globals()[name] = value
    return value


def _check_environment() -> None:
    try:
        import mcp.server  # noqa: F401
    except ImportError as error:  # pragma: no cover - depends on the environment
        raise ImportError(
            "call4agents_mcp needs the MCP Python SDK (mcp>=2.3): "
            'pip install "call4agents-core[mcp]"'
        ) from error
    from call4agents.integration import require_core

    require_core("mcp")
