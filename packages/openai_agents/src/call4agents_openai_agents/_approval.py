"""Approvals as SDK interruptions, bound in the ledger to the exact call.

1. Before a call runs, the SDK asks the tool's ``needs_approval`` (only when it holds no
   decision for the call). OnceOnly's policy asks the ledger's policy, then the tool's own
   ``needs_approval`` judged the way the SDK judges it bare (its argument preparation first: a
   call whose arguments validation would change, or whose validation runs code, needs a yes
   without the policy being asked). A call that already ran, or has a recorded yes or no, needs
   no question (the invoke path returns the result, spends the yes, or reports the no).
   Otherwise the ledger opens a ticket for exactly this run, tool and arguments, and the SDK
   pauses with an interruption.
2. A person answers with ``once.approve(state, item, by=...)`` / ``once.reject(...)``: the
   answer is written to that ticket (signed, with who decided) and to the ``RunState``. A plain
   ``state.approve(item)`` is honoured too: when the resumed run invokes the tool, the SDK's yes
   is written to the ticket the ledger opened for this very call (``by="RunState.approve"``),
   unless ``OnceOnly(trust_state_approvals=False)``.
3. A yes the SDK recorded for a call the ledger never asked about (a sticky ``always_approve``,
   an approval carried in a converted or restored run context) counts when the tool asks for
   approval the SDK's way (``needs_approval``): it is written to the ledger for exactly this
   call's arguments and spent once. A tool the ledger's own policy gates (``approval=``,
   ``approval_for``) runs only on a yes to a ticket the ledger opened.
4. The invoke path starts the call only by spending a recorded yes, in the same transaction as
   the intent. Two workers resuming one saved, approved state spend it once: the second finds
   the call started or done. A state whose arguments were edited after they were shown names
   another call: that yes is not carried, so nothing runs until a person decides.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any, cast

from agents import Agent, FunctionTool, RunContextWrapper
from agents.items import ToolApprovalItem
from agents.tool import get_function_tool_origin
from agents.tool_context import ToolContext

# The SDK's own judgement of a function tool's needs_approval: its argument preparation, then
# the policy. Private to the SDK (0.24 has no public form of it; its runner imports it from
# here), so the package pins the SDK's minor version and tests/openai_agents/test_sdk_private.py
# names what moved if a release drops it.
try:
    from agents.util._approvals import evaluate_function_tool_approval
except ImportError as exc:  # pragma: no cover - only with an SDK release the pin excludes
    raise ImportError(
        "call4agents_openai_agents judges needs_approval with the OpenAI Agents SDK's private "
        "agents.util._approvals.evaluate_function_tool_approval, which this openai-agents "
        'release lacks: install the release the package pins, pip install "openai-agents>=0.24,'
        '<0.25"'
    ) from exc

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
"""Recorded as who decided when the SDK's yes (``state.approve(item)``, or an approval the run
context carries) is written to the ledger."""

Policy = Callable[[RunContextWrapper[Any], dict[str, Any], str], Awaitable[bool]]


def policy(once: Owner, tool: FunctionTool, options: EffectOptions) -> Policy:
    """The wrapped tool's ``needs_approval``: True when a person must decide this call now.

    ``tool`` is the user's tool as it was before wrapping: its own invoker and policy.
    """

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
        if not action.needs_approval and not await own_policy_asks(tool, ctx, params, call_id):
            return False
        action.needs_approval = True  # the tool's own SDK policy binds to the ledger too
        return await asyncio.to_thread(ask, action)

    return needs_approval


async def own_policy_asks(
    tool: FunctionTool, ctx: RunContextWrapper[Any], params: dict[str, Any], call_id: str
) -> bool:
    """The tool's own ``needs_approval`` for this call, judged as the SDK judges it bare.

    The SDK first prepares the arguments with the tool's own invoker: a call whose validation
    would change them (defaults, aliases, coercion) or would run application code (validators,
    models, patterns) needs a yes without the policy being asked, so that code runs only after
    the yes. The arguments are the model's, as the SDK parsed them (JSON keeps their order).
    """
    evaluation = await evaluate_function_tool_approval(tool, ctx, json.dumps(params), call_id)
    return evaluation.outcome == "require_approval"


def own_policy_may_ask(tool: FunctionTool) -> bool:
    """Whether the tool's own ``needs_approval`` can ask for any call (judged without running
    it: a function may)."""
    return tool.needs_approval is not False


def sdk_decision(tool: FunctionTool, ctx: ToolContext[Any]) -> bool | None:
    """The SDK's recorded decision for this invocation: True (a yes), False, or None (none).

    Asked the way the SDK asks before it invokes the tool: for this agent's call, so a yes
    another agent's same-named tool got, or one its run context holds for another capability,
    is no yes here.
    """
    if not ctx.tool_call_id:
        return None
    if ctx.tool_call is None or ctx.agent is None:  # invoked outside a run: name and call id
        return ctx.is_tool_approved(ctx.tool_name, ctx.tool_call_id)
    item = ToolApprovalItem(
        agent=cast(Agent[Any], ctx.agent),
        raw_item=ctx.tool_call,
        tool_name=ctx.tool_name,
        tool_namespace=ctx.tool_namespace,
        tool_origin=get_function_tool_origin(tool),
    )
    return ctx.get_approval_status(
        ctx.tool_name,
        ctx.tool_call_id,
        tool_namespace=ctx.tool_namespace,
        tool_lookup_key=item.tool_lookup_key,
        current_invocation=item,
    )


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


def asked(action: Action) -> bool:
    """Whether a ticket about exactly this call stands in the ledger: a no, a yes not yet spent,
    or a question still open (then the gate refuses the call, as a call that must wait)."""
    now = time.time()
    return any(
        t.state == "denied" or (t.state in ("approved", "pending") and t.expires_at > now)
        for t in tickets_for(action)
    )


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


def carry_state_yes(action: Action, *, ledger_asks: bool) -> None:
    """Write the SDK's yes for this call to the ledger: to the ticket the ledger opened for it,
    or, for a call the ledger never asked about, as a decided ticket of its own unless the
    ledger's own policy (``ledger_asks``) gates the tool."""
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
    if mine:
        return  # answered, spent or expired: the gate judges what is there
    _refuse_yes_of_another_run(action, now)
    if not ledger_asks:
        # The SDK's own approval step gates the tool and its yes stands for this call (a sticky
        # approval, one carried in a converted context): bound to these arguments, spent once.
        action.ledger.approve_action(action, by=STATE_YES)


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
