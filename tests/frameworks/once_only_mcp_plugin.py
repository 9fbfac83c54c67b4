"""A pytest plugin that switches OnceOnly on in the MCP Python SDK's own tests.

Loaded with ``-p once_only_mcp_plugin`` (this folder on ``PYTHONPATH``): every ``MCPServer``
the tests make gets ``OnceOnly()``, by the route ``C4A_MCP_ROUTE`` names. ``middleware`` (the
default, the recommended way): first in its ``middleware`` list (outside the tests' own, so a
test finding its middleware last still does). ``extension``: first in its ``extensions`` list.
Each test records in a fresh SQLite ledger of its own. Nothing else of the tests changes.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from typing import Any

from mcp.server.mcpserver import MCPServer
from plugin_ledger import _fresh_ledger  # noqa: F401  (an autouse fixture, by import)

from call4agents_mcp import OnceOnly

_bare_init = MCPServer.__init__
_ROUTE = os.environ.get("C4A_MCP_ROUTE", "middleware")
if _ROUTE not in ("middleware", "extension"):
    raise RuntimeError(f"C4A_MCP_ROUTE must be 'middleware' or 'extension', not {_ROUTE!r}")


@functools.wraps(_bare_init)
def _init(
    self: MCPServer,
    *args: Any,
    middleware: Sequence[Any] | None = None,
    extensions: Sequence[Any] | None = None,
    **kw: Any,
) -> None:
    if _ROUTE == "middleware":
        middleware = [OnceOnly(), *(middleware or ())]
    else:
        extensions = [OnceOnly(), *(extensions or ())]
    _bare_init(self, *args, middleware=middleware, extensions=extensions, **kw)


MCPServer.__init__ = _init  # type: ignore[method-assign]
