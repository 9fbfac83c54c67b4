"""The MCP Python SDK's own server and client tests, run bare and again with OnceOnly switched on.

The pinned release's sdist on the package index ships its tests; ``suites`` fetches and unpacks
them. The chosen files are its tests of ``MCPServer`` tools, tool errors, validation, elicitation,
cancellation, extensions and middleware, driven through the SDK's in-memory client. Its conftest
is left out (it wants BlockBuster and Logfire, which measure nothing of tools), and so is one
file that imports the repository's examples, which the sdist does not ship; its
``filterwarnings = error`` stays. The runs switched on load ``once_only_mcp_plugin``:
``OnceOnly()`` joins every ``MCPServer``'s middleware, or (the other route it offers) its
extensions, each test on a fresh SQLite ledger. Every test that passes bare must pass switched
on, except the named differences below.
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import pytest

from tests.frameworks import suites

pytest.importorskip("mcp.server.mcpserver", reason="the MCP SDK is not installed on this Python")

RELEASE = suites.Release(
    project="mcp",
    version="2.3.0",
    sha256="8b147a50441cf059dc88c684e0aeed3687f0aa0f39c6cde7b90330effd2b34d8",
    folder="mcp-2.3.0",
    # The SDK's own settings that matter here (its pyproject's): warnings are errors, but for
    # its advisory deprecations.
    ini=(
        "[pytest]\nxfail_strict = true\n"
        "markers =\n    requirement(id): links a test to a requirement\n"
        "filterwarnings =\n    error\n"
        "    ignore:.*is deprecated as of 2026-07-28 \\(SEP-2577\\).:mcp.MCPDeprecationWarning\n"
        "    ignore:Client-to-server progress is deprecated as of 2026-07-28.*"
        ":mcp.MCPDeprecationWarning\n"
        "    ignore:ping is removed as of 2026-07-28.*:mcp.MCPDeprecationWarning\n"
    ),
)
_SERVER = "tests/server/mcpserver"
FILES = [
    f"{_SERVER}/test_server.py",
    f"{_SERVER}/test_tool_manager.py",
    f"{_SERVER}/test_extension.py",
    f"{_SERVER}/test_elicitation.py",
    f"{_SERVER}/test_url_elicitation.py",
    f"{_SERVER}/test_url_elicitation_error_throw.py",
    f"{_SERVER}/tools",
    "tests/server/test_validation.py",
    "tests/server/test_cancel_handling.py",
    "tests/server/test_lowlevel_exception_handling.py",
    "tests/client/test_client.py",
]
_ADVERTISED = (
    "OnceOnly advertises itself, as the SDK's extension API has an extension do: under "
    "capabilities.extensions['io.call4agents/once-only'] on the 2026-07-28 wire (SEP-2133), under "
    "capabilities.experimental on the handshake era, whose schema has no extensions. It is how a "
    "client learns to send an idempotency key (and the window a keyless retry is matched in), so "
    "it is what once-only adds; an exact snapshot of the server's capabilities shows it"
)
_ADVERTISED_MODERN = {
    f"{_SERVER}/test_server.py::"
    "test_server_advertises_change_notifications_on_the_modern_wire_by_default": _ADVERTISED,
    f"{_SERVER}/test_server.py::test_subscriptions_false_neither_advertises_nor_serves_listen": (
        _ADVERTISED
    ),
    f"{_SERVER}/test_extension.py::"
    "test_extension_settings_advertised_under_server_capabilities": _ADVERTISED,
}
EXPECTED = {
    **_ADVERTISED_MODERN,
    "tests/client/test_client.py::test_client_is_initialized": _ADVERTISED,
}
# Given as an extension, the SDK advertises it on the 2026-07-28 wire alone.
EXPECTED_AS_EXTENSION = {
    **_ADVERTISED_MODERN,
    f"{_SERVER}/test_extension.py::test_plain_extension_leaves_the_tool_call_handler_bare": (
        "OnceOnly as an extension intercepts tools/call, so the SDK composes its interceptor "
        "chain around the handler: the test compares the handler with the bare one"
    ),
}
_OPTIONS = ["--noconftest", "-p", "no:asyncio"]  # see above; the anyio plugin runs the tests


@pytest.fixture(scope="module")
def bare() -> tuple[Path, set[str]]:
    suites.check_installed(RELEASE, importlib.metadata.version("mcp"))
    root = suites.unpacked(RELEASE)
    return root, suites.passed(root, FILES, plugin=None, options=_OPTIONS)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("route", "expected"),
    [("middleware", EXPECTED), ("extension", EXPECTED_AS_EXTENSION)],
)
def test_every_test_passing_bare_passes_with_once_only(
    bare: tuple[Path, set[str]], route: str, expected: dict[str, str]
) -> None:
    root, passed_bare = bare
    switched_on = suites.passed(
        root,
        FILES,
        plugin="once_only_mcp_plugin",
        options=_OPTIONS,
        env={"C4A_MCP_ROUTE": route},
    )
    suites.assert_same_outcomes(passed_bare, switched_on, expected, at_least=300)
