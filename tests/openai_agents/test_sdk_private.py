"""The OpenAI Agents SDK's private names the integration relies on, checked against the
installed release, so an SDK release that moves them fails here by name instead of somewhere
deep in a run. The package pins the SDK's minor version (0.24); 0.24 offers no public form of
either. When one fails: find the name's new home in the release, or keep the pin."""

from __future__ import annotations

import dataclasses
import importlib
import inspect

from agents import Agent, Handoff, handoff

WHY = "call4agents_openai_agents relies on it (see its _approval and _handoffs modules)"


def test_the_sdks_own_approval_judgement_is_where_the_integration_imports_it() -> None:
    name = "agents.util._approvals.evaluate_function_tool_approval"
    try:
        module = importlib.import_module("agents.util._approvals")
    except ImportError as exc:  # pragma: no cover - only with another SDK release
        raise AssertionError(f"the SDK no longer has agents.util._approvals; {WHY}") from exc
    found = getattr(module, "evaluate_function_tool_approval", None)
    assert found is not None, f"the SDK no longer has {name}; {WHY}"
    params = list(inspect.signature(found).parameters)
    assert params[:4] == ["function_tool", "context", "arguments", "call_id"], (
        f"{name} now takes {params}; {WHY}"
    )


def test_a_handoff_object_still_shows_its_agent() -> None:
    fields = {f.name for f in dataclasses.fields(Handoff)}
    assert "_agent_ref" in fields, f"the SDK's Handoff no longer has _agent_ref; {WHY}"
    target = Agent(name="billing")
    made = handoff(target, tool_name_override="to_billing")
    ref = made._agent_ref
    assert ref is not None, f"handoff(agent)._agent_ref is no longer set; {WHY}"
    assert ref() is target, f"handoff(agent)._agent_ref no longer leads to the agent; {WHY}"
