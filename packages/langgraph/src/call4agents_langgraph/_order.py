"""Refuse to run when OnceOnly sits outside (before) HumanInTheLoopMiddleware.

create_agent nests tool-call middleware in list order, first outermost. HumanInTheLoopMiddleware
swaps in a reviewer's edited arguments inside its own ``wrap_tool_call``; a ledger outside it
would key and record the model's arguments while the edited ones run, and in ``per_call`` mode
it would also start the action before the person answered. Neither is visible in the agent's
public surface at construction, so both are caught on the first call that shows them, before
anything runs (batched edits) or before the person's answer is used (per-call pauses).
"""

from __future__ import annotations

from typing import Any

from langgraph.errors import GraphInterrupt

from call4agents import ConfigurationError

# The state key HumanInTheLoopMiddleware declares in its state schema for batched edits
# (langchain.agents.middleware.human_in_the_loop._HumanInTheLoopState).
HITL_EDITS_KEY = "hitl_edited_tool_calls"

WRONG_ORDER = (
    "OnceOnly is listed before HumanInTheLoopMiddleware, so it wraps it: it would record the "
    "model's arguments while the reviewer's edited ones run, and start the action before the "
    "person answered. List it after: create_agent(..., middleware=[HumanInTheLoopMiddleware"
    "(...), OnceOnly(...)]). Nothing was run for tool call {call_id!r}."
)


def check_no_pending_edit(request: Any) -> None:
    """Batched HITL: an edit for this call still waiting to be applied means HITL is inside us."""
    state = request.state
    edits = state.get(HITL_EDITS_KEY) if isinstance(state, dict) else None
    if not edits:
        return
    call = request.tool_call
    edit = edits.get(call.get("id") or "")
    if edit is None:
        return
    if edit.get("name") != call["name"] or edit.get("args") != call["args"]:
        raise ConfigurationError(WRONG_ORDER.format(call_id=call.get("id")))


def is_inner_review(exc: GraphInterrupt, call_id: str | None) -> bool:
    """Per-call HITL: the pause raised inside our handler is a review of this very call."""
    for found in exc.args[0] if exc.args else ():
        value = getattr(found, "value", None)
        if (
            isinstance(value, dict)
            and value.get("type") == "tool_approval"
            and value.get("tool_call_id") == call_id
            and "ticket" not in value  # ours carry a ticket; HITL's do not
        ):
            return True
    return False


def wrong_order(call_id: str | None) -> ConfigurationError:
    return ConfigurationError(WRONG_ORDER.format(call_id=call_id))
