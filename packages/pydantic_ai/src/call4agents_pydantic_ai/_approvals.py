"""Approvals through Pydantic AI's deferred tools, bound in the ledger to the arguments that run.

A call that needs a "yes" ends the run with ``DeferredToolRequests``; its metadata carries the
ledger's ticket for exactly that call. The app answers with ``DeferredToolResults`` on a new run
over the saved history. Pydantic AI keys that answer by ``tool_call_id`` only, so on its own a
history edited between the question and the answer would run arguments nobody saw. Here the
answer is written to the ledger before the call runs, against the ticket of the call that was
shown; the ledger then lets the call run only if the arguments about to run are the ones that
ticket was for, and spends the "yes" with the intent, so a continuation sent twice (or by two
workers at once) runs the tool once. ``ToolApproved(override_args=...)`` is a "yes" to the edited
call itself.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping
from typing import Any

from pydantic_ai import ApprovalRequired, DeferredToolResults, RunContext, ToolDenied
from pydantic_ai.messages import ModelResponse, ToolCallPart

import call4agents as c4a
from call4agents import ApprovalRequest, LedgerError
from call4agents.integration import Action, open_ticket, shown_other_args

META = "call4agents"
"""The key of Call4Agents' entry in ``DeferredToolRequests.metadata[tool_call_id]``."""

DEFAULT_BY = "pydantic-ai DeferredToolResults"
"""Who decided, when ``DeferredToolResults.answered_by`` does not say."""

EDITED = "approved with edited arguments (ToolApproved.override_args)"


def deferral(exc: c4a.ApprovalRequired) -> ApprovalRequired:
    """Pydantic AI's way to end the run and ask: the exact call and its ticket as metadata."""
    request: ApprovalRequest = exc.request
    return ApprovalRequired(metadata={META: request.as_dict()})


def shown_ticket(metadata: Any) -> str | None:
    """The ticket the app echoed back in ``DeferredToolResults.metadata``, if it did."""
    if not isinstance(metadata, Mapping):
        return None
    entry = metadata.get(META)
    ticket = entry.get("ticket") if isinstance(entry, Mapping) else None
    return ticket if isinstance(ticket, str) else None


def original_call(ctx: RunContext[Any], call_id: str) -> ToolCallPart | None:
    """The call as the model made it and the history keeps it (without any override_args)."""
    for message in reversed(ctx.messages):
        if isinstance(message, ModelResponse):
            for part in message.tool_calls:
                if part.tool_call_id == call_id:
                    return part
    return None


def overridden(ctx: RunContext[Any], call: ToolCallPart) -> bool:
    """Whether the approver replaced the model's arguments (``ToolApproved(override_args=...)``).

    Pydantic AI validates and runs the override but leaves the history's call as the model made
    it, so the two differ exactly when the approver edited the call.
    """
    found = original_call(ctx, call.tool_call_id)
    return found is not None and found.args_as_dict() != call.args_as_dict()


async def record_yes(ctx: RunContext[Any], call: ToolCallPart, action: Action, by: str) -> None:
    """Before an approved call runs: write the person's "yes" for the call that will run.

    An edited call gets a "yes" of its own. Otherwise the yes goes to the ticket that was shown:
    the one echoed in the metadata, else the pending ticket for exactly these arguments. If the
    arguments no longer match the shown ticket (an edited history), nothing is approved and the
    ledger opens a new ticket when the call is tried: it runs nothing and asks again.
    """
    if not action.needs_approval:
        return
    if overridden(ctx, call):
        await asyncio.to_thread(_approve_edited, action, by)
        return
    ticket = shown_ticket(ctx.tool_call_metadata)
    await asyncio.to_thread(_approve_shown, action, ticket, by)


def _approve_edited(action: Action, by: str) -> None:
    # None when the edited call already ran: the run then returns its recorded result.
    action.ledger.approve_action(action, by=by, reason=EDITED)


def _approve_shown(action: Action, ticket: str | None, by: str) -> None:
    requests = action.ledger.approvals(run_id=action.run_id)
    if ticket is not None:
        shown = next((r for r in requests if r.ticket == ticket), None)
        if shown is None or shown.key != action.key or not shown.covers(action):
            return  # the history no longer holds the call that was shown
    else:
        shown = next(
            (
                r
                for r in requests
                if r.key == action.key and r.state == "pending" and r.covers(action)
            ),
            None,
        )
    if shown is None or shown.state != "pending":
        return  # approved, spent or denied already: the ledger's gate knows what to do
    if shown_other_args(action) is not None:
        return  # an edited history: the yes was for what was shown; the gate says what changed
    # Decided or spent meanwhile by another worker, or expired: the ledger's gate settles it.
    with contextlib.suppress(LedgerError):
        action.ledger.approve(shown.ticket, by=by)


async def record_denials(
    ctx: RunContext[Any],
    results: DeferredToolResults,
    action_of: Callable[[ToolCallPart], Action | None],
) -> list[tuple[Action, c4a.ApprovalDenied]]:
    """Write each "no" in the answers to the ledger, so the same call is refused if asked again.

    Returns each call that got a "no", with the refusal the ledger gives it from now on (for
    ``escalate_on="denied"``).
    """
    found: list[tuple[Action, c4a.ApprovalDenied]] = []
    for call_id, answer in results.approvals.items():
        if answer is not False and not isinstance(answer, ToolDenied):
            continue
        call = original_call(ctx, call_id)
        action = action_of(call) if call is not None else None
        if action is None or not action.needs_approval:
            continue
        reason = answer.message if isinstance(answer, ToolDenied) else None
        by = results.answered_by.get(call_id) or DEFAULT_BY
        ticket = shown_ticket(results.metadata.get(call_id))
        if await asyncio.to_thread(_deny_shown, action, ticket, by, reason):
            found.append((action, _refusal(action, by, reason)))
    return found


def _deny_shown(action: Action, ticket: str | None, by: str, reason: str | None) -> bool:
    """Deny the shown ticket; whether a "no" now stands for the call."""
    ledger = action.ledger
    if ticket is None:  # a bare "no": the open ticket for this call, a yes not yet spent included
        found = open_ticket(action)
        ticket = found.ticket if found is not None else None
    if ticket is None:
        return False
    try:
        ledger.deny(ticket, by=by, reason=reason)
    except LedgerError:  # spent or decided: a late "no" changes nothing
        return False
    return True


def _refusal(action: Action, by: str, reason: str | None) -> c4a.ApprovalDenied:
    why = f"denied by {by}" + (f": {reason}" if reason else "")
    return c4a.ApprovalDenied(
        f"{action.tool} in run {action.run_id!r} was {why}; it did not run.",
        key=action.key,
        run_id=action.run_id,
        tool=action.tool,
        reason=why,
    )
