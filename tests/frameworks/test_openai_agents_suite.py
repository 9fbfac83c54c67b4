"""The OpenAI Agents SDK's own tests, run bare and again with OnceOnly switched on.

The pinned release's sdist on the package index ships its tests (``tests/``, with its conftest
and offline fake model); ``suites`` fetches and unpacks them. The chosen files are the SDK's
tests of running agents with tools, approvals and resuming a ``RunState``, tool guardrails and
tool errors, streaming and cancellation. The second run loads ``once_only_agents_plugin``: every
run's starting agent goes through ``OnceOnly().wrap(...)``, each test on a fresh SQLite ledger.
Every test that passes bare must pass switched on, except the named differences below (a
key without ``[parameters]`` covers all of a test's).

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
# Why a test differs, shared by the tests it covers (each found in the switched-on run's output).
_POLICY = (
    "OnceOnly's needs_approval calls the tool's own policy itself, with the raw arguments: the "
    "SDK's argument preparation (validators run only after an explicit approval, a policy skipped "
    "once a decision is recorded) is bypassed (to fix in the "
    "integration)"
)
_REPEAT = (
    "the test's second run repeats a call (same call id and arguments) under the test's one run "
    "id, so once-only returns the recorded result instead of running the tool again"
)
_HANDOFF = (
    "a handoff() object hides its agent from OnceOnly.wrap, which refuses it in one line "
    "(ConfigurationError) rather than leave the agent's tools unrecorded"
)
_CONVERTED = (
    "an approval the SDK carries into a converted or nested run context was never asked by the "
    "ledger for that call, so the call waits for a person again instead of running"
)
_STREAMED_GUARDRAILS = (
    "on a streamed resume the tool guardrail results of the resumed turn are not reported "
    "(issue 47)"
)
_IDENTITY = (
    "two agents of the same name and fields: the handoff goes to the second, which equals the "
    "first bare (dataclass ==) but not once each has its own wrapped instructions and hooks"
)
UNSTEADY = {
    "tests/test_cancel_streaming.py::"
    "test_cancel_with_pending_parallel_input_guardrail_finishes_cleanup": (
        "counts the spans started before a cancel lands; switched on, the integration's own "
        "span sometimes starts first (it failed in two runs of three)"
    ),
    "tests/test_stream_events.py::"
    "test_handoff_filter_copy_does_not_duplicate_streamed_model_items": (
        "its handoff() object hides its agent from OnceOnly.wrap; switched on it passed in one "
        "run and failed in the next two on a busy machine"
    ),
}

_RUNNER = "tests/test_agent_runner.py"
_STREAMED = "tests/test_agent_runner_streamed.py"
_SCOPED = "tests/test_agent_scoped_approvals.py"
_ARGS = "tests/test_function_tool_approval_arguments.py"
_HITL = "tests/test_hitl_error_scenarios.py"
EXPECTED: dict[str, str] = {
    f"{_RUNNER}::test_handoffs": _IDENTITY,
    f"{_STREAMED}::test_handoffs": _IDENTITY,
    f"{_STREAMED}::test_ambiguous_serialized_approval_state_fails_before_tool_execution": _REPEAT,
    f"{_STREAMED}::test_serialized_filtered_handoff_approval_with_empty_prefix_resumes": _HANDOFF,
    f"{_STREAMED}::test_serialized_later_turn_approval_with_output_guardrail_resumes": _REPEAT,
    f"{_STREAMED}::test_serialized_mixed_approval_guardrail_preserves_only_accepted_outputs": (
        _REPEAT
    ),
    f"{_STREAMED}::test_streamed_resume_handoff_turn_reports_tool_guardrail_results": (
        _STREAMED_GUARDRAILS
    ),
    f"{_STREAMED}::test_streamed_resume_terminal_turn_reports_tool_guardrail_results": (
        _STREAMED_GUARDRAILS
    ),
    f"{_STREAMED}::test_streamed_resume_tool_guardrail_results_match_non_streamed": (
        _STREAMED_GUARDRAILS
    ),
    f"{_SCOPED}::test_converted_context_does_not_authorize_same_named_distinct_capability": (
        _CONVERTED
    ),
    f"{_SCOPED}::test_converted_context_does_not_repeat_completed_call": _CONVERTED,
    f"{_SCOPED}::test_converted_context_retains_other_graph_decisions": _CONVERTED,
    f"{_SCOPED}::test_runner_executes_converted_context_decisions": _CONVERTED,
    f"{_SCOPED}::test_function_exact_approval_preserves_native_sticky_rejection": _HANDOFF,
    f"{_SCOPED}::test_sticky_approval_stays_with_agent_across_handoffs": _HANDOFF,
    f"{_SCOPED}::test_tied_duplicate_owner_restore_requires_reapproval": _HANDOFF,
    f"{_HITL}::test_execute_path_skips_needs_approval_checker_when_status_resolved": _POLICY,
    f"{_HITL}::test_nested_agent_tool_does_not_inherit_parent_approvals": _CONVERTED,
    **{
        f"{_ARGS}::{name}": _POLICY
        for name in (
            "test_application_validation_waits_for_explicit_approval",
            "test_benign_omission_requires_approval_and_explicit_input_runs",
            "test_cancelled_policy_does_not_reuse_preparation_for_a_new_run",
            "test_changed_or_uninspectable_argument_requires_manual_approval",
            "test_compiled_pattern_requires_explicit_approval",
            "test_defaults_and_alias_keep_existing_policy",
            "test_input_guardrail_blocks_application_validation",
            "test_invalid_keyword_reconstruction_uses_failure_policy",
            "test_invalid_typed_input_requires_approval_before_failure_policy",
            "test_manual_decision_roundtrip_does_not_rerun_predicate",
            "test_nested_input_aliases_keep_original_policy_keys",
            "test_nested_transformations_require_approval",
            "test_pattern_validation_runs_after_approval",
            "test_plugin_validation_follows_input_guardrails",
            "test_plugin_validation_waits_for_approval",
            "test_preparation_is_preserved_on_copied_tools",
            "test_root_parameter_order_does_not_change_approval",
            "test_validator_exception_preserves_failure_policy",
        )
    },
}


@pytest.mark.slow
def test_every_test_passing_bare_passes_with_once_only() -> None:
    from agents.version import __version__

    suites.check_installed(RELEASE, __version__)
    root = suites.unpacked(RELEASE)
    bare = suites.passed(root, FILES, plugin=None)
    switched_on = suites.passed(root, FILES, plugin="once_only_agents_plugin")
    switched_on = suites.second_look(
        root, bare, switched_on, {**EXPECTED, **UNSTEADY}, "once_only_agents_plugin"
    )
    suites.assert_same_outcomes(bare, switched_on, EXPECTED, at_least=500, unsteady=UNSTEADY)
