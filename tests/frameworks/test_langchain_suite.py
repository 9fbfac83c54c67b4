"""LangChain's own agent tests, run bare and again with OnceOnly switched on.

The tests come from the pinned release's sdist on the package index (it ships them), fetched by
pip at test time and unpacked into a cache inside the environment, never into this repository.
The chosen files are LangChain's middleware and tool-calling tests that run offline with its own
fake model. The second run loads
``once_only_plugin``: ``OnceOnly()`` joins every ``create_agent`` middleware list, each test on a
fresh SQLite ledger. Every test that passes bare must pass switched on, except the named
differences below, each with its reason (and each must still be one, so the list stays short).
"""

from __future__ import annotations

import pytest

from tests.frameworks import suites

pytest.importorskip("langchain", reason="LangChain is not installed on this Python")

RELEASE = suites.Release(
    project="langchain",
    version="1.5.2",
    sha256="63816aee7f55503db5c4f266a0874047d417957ae70cbf27397325c584982c52",
    folder="langchain-1.5.2",
    # LangChain's own settings (its pyproject's): async tests without markers.
    ini="[pytest]\nasyncio_mode = auto\nasyncio_default_fixture_loop_scope = function\n",
)
AGENTS = "tests/unit_tests/agents"
FILES = [
    f"{AGENTS}/middleware/core/test_wrap_tool_call.py",
    f"{AGENTS}/middleware/core/test_tools.py",
    f"{AGENTS}/middleware/core/test_dynamic_tools.py",
    f"{AGENTS}/middleware/implementations/test_tool_call_limit.py",
    f"{AGENTS}/middleware/implementations/test_tool_error.py",
    f"{AGENTS}/middleware/implementations/test_human_in_the_loop.py",
    f"{AGENTS}/test_invalid_tool_calls.py",
]
_ADDED_TOOLS = (
    "LangChain checks tools a middleware adds in wrap_model_call only while no middleware "
    "wraps tool calls; OnceOnly does, so the model gets the ToolNode's own 'not a valid "
    "tool' error instead (docs/langgraph.md)"
)
_CORE = f"{AGENTS}/middleware/core"
EXPECTED = {
    f"{_CORE}/test_tools.py::test_unknown_tool_raises_error": _ADDED_TOOLS,
    # Async (pytest-asyncio), sync and async invoke each, with and without static tools.
    f"{_CORE}/test_dynamic_tools.py::test_dynamic_tool_without_handler_raises_error": _ADDED_TOOLS,
}


@pytest.mark.slow
def test_every_test_passing_bare_passes_with_once_only() -> None:
    import langchain

    suites.check_installed(RELEASE, langchain.__version__)
    root = suites.unpacked(RELEASE)
    # Its conftest wants services and snapshot plugins; the chosen files need none of it. Its
    # async tests run in both runs, through pytest-asyncio as in LangChain's own settings.
    options = ["--noconftest"]
    bare = suites.passed(root, FILES, plugin=None, options=options)
    switched_on = suites.passed(root, FILES, plugin="once_only_plugin", options=options)
    suites.assert_same_outcomes(bare, switched_on, EXPECTED, at_least=150)
