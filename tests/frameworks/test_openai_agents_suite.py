"""The OpenAI Agents SDK's own tests, run bare and again with OnceOnly switched on.

The pinned release's sdist on the package index ships its tests (``tests/``, with its conftest
and offline fake model); ``suites`` fetches and unpacks them. The chosen files are the SDK's
tests of running agents with tools, approvals and resuming a ``RunState``, tool guardrails and
tool errors, streaming and cancellation. The second run loads ``once_only_agents_plugin``: every
run's starting agent goes through ``OnceOnly().wrap(...)``, each test on a fresh SQLite ledger.
Every test that passes bare must pass switched on, except the named differences below.

Of the other integrations' frameworks: Pydantic AI's sdist (``pydantic-ai-slim``) ships no tests
(its tests live only in its repository), so ``tests/pydantic_ai`` holds its differences as tests
of our own, bare beside switched on.
"""

from __future__ import annotations

import pytest

from tests.frameworks import suites

pytest.importorskip("agents", reason="the OpenAI Agents SDK is not installed on this Python")

RELEASE = suites.Release(
    project="openai-agents",
    version="0.24.0",
    sha256="4b4b285f4fed81fdf1b4ac426a9101658d9cd29b4fb1aaeee18f639b77e704e3",
    folder="openai_agents-0.24.0",
    # The SDK's own settings (its pyproject's): async tests without markers, one loop a session.
    ini=(
        "[pytest]\nasyncio_mode = auto\nasyncio_default_fixture_loop_scope = session\n"
        "markers =\n    allow_call_model_methods: may call a real model's methods\n"
    ),
)
FILES = [
    "tests/test_agent_runner.py",
    "tests/test_agent_runner_streamed.py",
    "tests/test_hitl_error_scenarios.py",
    "tests/test_agent_scoped_approvals.py",
    "tests/test_function_tool_approval_arguments.py",
    "tests/test_run_context_approvals.py",
    "tests/test_runner_guardrail_resume.py",
    "tests/test_resume_tool_use_behavior.py",
    "tests/test_tool_guardrails.py",
    "tests/test_tool_use_behavior.py",
    "tests/test_tool_failure_boundaries.py",
    "tests/test_tool_identity.py",
    "tests/test_function_tool.py",
    "tests/test_max_turns.py",
    "tests/test_cancel_streaming.py",
    "tests/test_soft_cancel.py",
    "tests/test_stream_events.py",
]
EXPECTED: dict[str, str] = {}


# Not yet sorted: switched on, some hundreds of these tests fail (first seen: a tool the fake model
# calls again with the same call id in a later turn returns the recorded result instead of
# running; handoff() objects are refused, as documented; approvals resumed under another run id
# are refused by name). Strict, so the day the list is named and short this must change.
@pytest.mark.slow
@pytest.mark.xfail(strict=True, reason="differences switched on not yet named in EXPECTED")
def test_every_test_passing_bare_passes_with_once_only() -> None:
    from agents.version import __version__

    suites.check_installed(RELEASE, __version__)
    root = suites.unpacked(RELEASE)
    bare = suites.passed(root, FILES, plugin=None)
    switched_on = suites.passed(root, FILES, plugin="once_only_agents_plugin")
    suites.assert_same_outcomes(bare, switched_on, EXPECTED, at_least=500)
