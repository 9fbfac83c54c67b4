"""Approvals as LangGraph interrupts, in HumanInTheLoopMiddleware's per-call decision shape.

The interrupt value is HITL's ``ToolApprovalRequest`` (``type="tool_approval"``, ``tool_call_id``,
``name``, ``args``, ``description``) plus the ledger's ticket, so a UI built for HITL can show it
and answer ``{"type": "approve"}``, ``{"type": "edit", "edited_action": {"name", "args"}}`` or
``{"type": "reject", "message": ...}``. Each answer is written to the ledger before anything
runs, bound to the arguments that will run: an edit is a "yes" to the edited call alone.

LangGraph re-runs the tool node from its top on resume, so this code runs twice for one answer:
first it raises the interrupt, then ``interrupt()`` returns the answer. Every step is safe to
repeat: the ledger holds the pending ticket, and a decision already recorded is recorded once.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal, Union, cast

from langgraph.types import interrupt
from pydantic import Discriminator
from typing_extensions import NotRequired, TypedDict

from call4agents import ApprovalRequired, ConfigurationError, LedgerError
from call4agents.effect import Action
from call4agents.integration import open_ticket

DEFAULT_BY = "a person, through a LangGraph interrupt"


class EditedAction(TypedDict):
    name: str
    args: dict[str, Any]


class ApproveDecision(TypedDict):
    type: Literal["approve"]
    by: NotRequired[str]
    message: NotRequired[str]


class EditDecision(TypedDict):
    type: Literal["edit"]
    edited_action: EditedAction
    by: NotRequired[str]
    message: NotRequired[str]


class RejectDecision(TypedDict):
    type: Literal["reject"]
    message: NotRequired[str]
    by: NotRequired[str]


Decision = Union[ApproveDecision, EditDecision, RejectDecision]  # noqa: UP007
# LangGraph validates the resume value against this before saving it, so a malformed answer
# fails the resume (and can be sent again) instead of reaching the ledger.
DECISION_SCHEMA = Annotated[Decision, Discriminator("type")]

ALLOWED = ["approve", "edit", "reject"]


def request_payload(exc: ApprovalRequired, tool_call: Any) -> dict[str, Any]:
    """The interrupt value: exactly what will run (redacted values masked) and its ticket."""
    req = exc.request
    args = dict(req.args)
    return {
        "type": "tool_approval",
        "tool_call_id": tool_call.get("id"),
        "name": tool_call["name"],
        "args": args,
        "description": (
            "Tool execution requires approval\n\n"
            f"Tool: {tool_call['name']}\nArgs: {json.dumps(args, sort_keys=True, default=str)}"
        ),
        "allowed_decisions": list(ALLOWED),
        "ticket": req.ticket,
        "run_id": req.run_id,
        "action_key": req.key,
        "expires_at": req.expires_at,
        # Set when the saved state was edited after the call was first shown with other args.
        "changed_from": dict(exc.shown.args) if exc.shown is not None else None,
    }


def ask(exc: ApprovalRequired, tool_call: Any) -> Decision:
    """Pause for a person (first run) or return their answer (the run after the resume)."""
    answer = interrupt(request_payload(exc, tool_call), response_schema=cast(Any, DECISION_SCHEMA))
    return cast(Decision, answer)


def decided_by(decision: Decision) -> str:
    by = decision.get("by")
    return by if isinstance(by, str) and by.strip() else DEFAULT_BY


def edited_args(decision: EditDecision, tool_call: Any) -> dict[str, Any]:
    edited = decision["edited_action"]
    if edited["name"] != tool_call["name"]:
        raise ConfigurationError(
            f"an edit may change the arguments of {tool_call['name']}, not switch to "
            f"{edited['name']!r}: reject the call and let the agent choose another tool"
        )
    return dict(edited["args"])


def waiting_answer() -> Any:
    """The resume value waiting for this task's first ``interrupt()``, left in place; else None.

    LangGraph hands a resume value only to the ``interrupt()`` that asks for it, and a call whose
    yes is already in the ledger runs without asking. Reading the value first lets a reject sent
    on resume reach that yes before it is spent. This reads LangGraph's task scratchpad (the
    state ``interrupt()`` itself reads); if its shape changes, this finds nothing and the no
    still works on a ticket that has not been approved yet.
    """
    try:
        from langgraph._internal._constants import CONFIG_KEY_SCRATCHPAD
        from langgraph.config import get_config

        scratchpad = get_config()["configurable"][CONFIG_KEY_SCRATCHPAD]
        resume = scratchpad.resume
        return resume[0] if resume else scratchpad.get_null_resume(False)
    except (ImportError, KeyError, RuntimeError, AttributeError, TypeError):
        return None


def reject_a_waiting_yes(action: Action) -> None:
    """A reject sent on resume, recorded on a yes not yet spent (see ``waiting_answer``)."""
    answer = waiting_answer()
    if not (isinstance(answer, dict) and answer.get("type") == "reject"):
        return
    ticket = open_ticket(action)
    if ticket is not None and ticket.state == "approved":
        record_ticket(action.ledger, ticket.ticket, cast(Decision, answer))


def record_ticket(ledger: Any, ticket: str, decision: Decision) -> None:
    """Write an approve or reject to the ticket; a ticket already decided or expired is left.

    The call is then tried again: the ledger's verdict (run, denied, or a fresh ticket when this
    one expired, which pauses again) decides what happens, the same way on every re-run.
    """
    by, reason = decided_by(decision), decision.get("message")
    try:
        if decision["type"] == "approve":
            ledger.approve(ticket, by=by, reason=reason)
        else:
            ledger.deny(ticket, by=by, reason=reason or "rejected by the reviewer")
    except LedgerError:
        pass
