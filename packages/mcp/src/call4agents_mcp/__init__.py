"""Call4Agents for MCP: a retried ``tools/call`` gets the first result instead of a second run.

Server, one line::

    from mcp.server.mcpserver import MCPServer
    from call4agents_mcp import OnceOnly

    server = MCPServer("mail", middleware=[OnceOnly()])

Client: send a stable idempotency key in ``_meta`` with :func:`call_tool`, or plug
:func:`tool_meta_resolver` (Agents SDK) or :func:`process_tool_call` (Pydantic AI) into the
framework's MCP client. :func:`ending_of` reads a result that says the run ended (a budget cut,
an escalation) as ``c4a.BudgetExceeded`` / ``c4a.Escalated``; ``call_tool`` raises it.
"""

try:
    import mcp.server  # noqa: F401
except ImportError as _error:  # pragma: no cover - depends on the environment
    raise ImportError(
        'call4agents_mcp needs the MCP Python SDK (mcp>=2.3): pip install "call4agents-core[mcp]"'
    ) from _error

import call4agents as _core

if not getattr(_core, "__c4a_core__", False):  # pragma: no cover - depends on the environment
    raise ImportError(
        "the installed `call4agents` is not the Call4Agents core (PyPI has an unrelated project "
        'of that name): pip uninstall call4agents, then pip install "call4agents-core[mcp]"'
    )

from ._endings import ending_of
from ._keys import KEY_META, call_tool, idempotency_key, process_tool_call, tool_meta_resolver
from ._server import OnceOnly

__all__ = [
    "KEY_META",
    "OnceOnly",
    "call_tool",
    "ending_of",
    "idempotency_key",
    "process_tool_call",
    "tool_meta_resolver",
]
