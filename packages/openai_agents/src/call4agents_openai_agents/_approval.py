"""Approvals as SDK interruptions, bound in the ledger to the exact call.

1. Before a call runs, the SDK asks the tool's ``needs_approval``. OnceOnly's policy asks the
   ledger: a call that already ran, or has a recorded yes or no, needs no question (the invoke
   path returns the result, spends the yes, or reports the no). Otherwise the ledger opens a
   ticket for exactly this run, tool and arguments, and the SDK pauses with an interruption.
2. A person answers with ``once.approve(state, item, by=...)`` / ``once.reject(...)``: the
   answer is written to that ticket (signed, with who decided) and to the ``RunState``. A plain
   ``state.approve(item)`` is honoured too: when the resumed run invokes the tool, the SDK's yes
   is written to the ticket the ledger opened for this very call (``by="RunState.approve"``),
   unless ``OnceOnly(trust_state_approvals=False)``.
3. The invoke path starts the call only by spending a recorded yes, in the same transaction as
   the intent. Two workers resuming one saved, approved state spend it once: the second finds
   the call started or done. A state whose arguments were edited names another call, for which
   the ledger never asked, so nothing is approved and nothing runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any

from agents import FunctionTool, RunContextWrapper
from agents.exceptions import UserError
from agents.tool_context import ToolContext

from call4agents import (
    ApprovalRequest,
    ConfigurationError,
    EffectOptions,
    LedgerError,
    UnstableArguments,
)
from call4agents.integration import Action, ends_run, shown_other_args

from ._owner import Owner

STATE_YES = "RunState.approve (OpenAI Agents SDK)"
"""Recorded as who decided when a plain ``state.approve(item)`` is carried into the ledger."""

Policy = Callable[[RunContextWrapper[Any], dict[str, Any], str], Awaitable[bool]]


def policy(once: Owner, tool: FunctionTool, options: EffectOptions) -> Policy:
    """The wrapped tool's ``needs_approval``: True when a person must decide this call now."""

    async def needs_approval(
        ctx: RunContextWrapper[Any], params: dict[str, Any], call_id: str
    ) -> bool:
        try:
            action = once.action(options, tool.name, params, ctx, call_id)
        except UnstableArguments:
            return False  # refused on invoke, before anything runs, with the reason
        except Exception as exc:
            if ends_run(exc):  # the approval policy function escalated: the run ends here
                await once.controls.end_run(exc)
            raise
        if not await approval_needed(action, tool, params, ctx, call_id):
            return False
        action.needs_approval = True  # the tool's own SDK policy binds to the ledger too
        return await asyncio.to_thread(ask, action)

    return needs_approval


async def approval_needed(
    action: Action,
    tool: FunctionTool,
    params: dict[str, Any],
    ctx: RunContextWrapper[Any],
    call_id: str,
) -> bool:
    """The ledger's policy (tool options, side-effect class) or the tool's own SDK policy."""
    if action.needs_approval:
        return True
    own: object = tool.needs_approval
    if isinstance(own, bool):
        return own
    if not callable(own):  # the SDK refuses it the same way when the tool runs bare
        raise UserError(
            f"Invalid needs_approval value on tool {tool.name!r}: expected a bool or callable, "
            f"got {type(own).__name__}."
        )
    found: Any = own(ctx, params, call_id)
    if inspect.isawaitable(found):  # the SDK accepts plain functions here too
        found = await found
    return bool(found)


def ask(action: Action) -> bool:
    """True if a person must answer first; opens (or finds) the ledger's ticket for the call."""
    done = _effect_state(action)
    if done is not None and done != "failed":
        return False  # it ran, runs, or is in doubt: the invoke path says which
    tickets = tickets_for(action)
    if any(t.state == "denied" for t in tickets):
        return False  # a no stands: the gate refuses the call
    now = time.time()
    if any(t.state == "approved" and t.expires_at > now for t in tickets):
        return False
    # Opens a ticket for exactly this call (or finds the open one) without claiming the action.
    request = action.ledger.request_approval(action)
    return request is not None and request.state == "pending"


def _effect_state(action: Action) -> str | None:
    try:
        return action.ledger.effect(action.key).state
    except LedgerError:
        return None  # never attempted


def tickets_for(action: Action) -> list[ApprovalRequest]:
    """The tickets about exactly this call, newest first: of its action, and of its arguments
    (one action key can stand for calls with other arguments under a ``key=``)."""
    found = action.ledger.approvals(action.run_id, key=action.key)
    mine = [t for t in found if t.covers(action)]
    return sorted(mine, key=lambda t: t.requested_at, reverse=True)


def carry_state_yes(action: Action, ctx: ToolContext[Any]) -> None:
    """Write a plain ``state.approve(item)`` to the ticket the ledger opened for this call."""
    if ctx.is_tool_approved(ctx.tool_name, ctx.tool_call_id) is not True:
        return
    if shown_other_args(action) is not None:
        return  # an edited state: the yes was for what was shown; the gate says what changed
    now = time.time()
    mine = tickets_for(action)
    for ticket in mine:
        if ticket.state == "pending" and ticket.expires_at > now:
            # Decided or expired meanwhile: then the gate judges what is there.
            with contextlib.suppress(LedgerError):
                action.ledger.approve(ticket.ticket, by=STATE_YES)
            return
    if not mine:
        _refuse_yes_of_another_run(action, now)


def _refuse_yes_of_another_run(action: Action, now: float) -> None:
    """The SDK's yes for a call the ledger asked about under another run id: the state was
    resumed with another run id (another session, context or ``run_id=``). The yes cannot be
    carried (a ticket binds its run), and running nothing without a word would hide why."""
    for ticket in action.ledger.approvals(state="pending"):
        elsewhere = ticket.run_id != action.run_id and ticket.tool == action.tool
        if elsewhere and ticket.expires_at > now and ticket.covers(action):
            raise ConfigurationError(
                f"the RunState approves {action.tool}, which the ledger asked about in run "
                f"{ticket.run_id!r} (ticket {ticket.ticket}), but this run resumed it as run "
                f"{action.run_id!r}, so the yes does not carry and nothing ran: resume with run "
                f"id {ticket.run_id!r} (the same session, context or OnceOnly(run_id=...)), or "
                f"approve the call in the ledger for run {action.run_id!r}"
            )
