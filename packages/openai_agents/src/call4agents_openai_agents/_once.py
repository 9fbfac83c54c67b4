"""``OnceOnly``: the one object a user adds to an Agents SDK agent."""

from __future__ import annotations

import asyncio
import copy
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from agents import Agent, FunctionTool, RunContextWrapper, RunState, Tool
from agents.items import ToolApprovalItem
from agents.tool_context import ToolContext

from call4agents import (
    ApprovalRequest,
    Budget,
    ConfigurationError,
    EffectOptions,
    Ledger,
    default_ledger,
)
from call4agents.integration import (
    Action,
    LedgerCore,
    OnceOnlySettings,
    ToolOptions,
    Trigger,
    action_for,
    current_run,
    options_for,
    warn_once,
)

from . import _approval, _handoffs, _tools
from ._controls import RunControls, hooks_for, instructions_for
from ._run_id import RunIdSource, require_run_id
from ._session import RunIdSession

if TYPE_CHECKING:
    from agents.mcp import MCPToolMetaContext
    from agents.memory import Session

TAgent = TypeVar("TAgent", bound=Agent[Any])


_UNSPENT = ("pending", "approved")


@dataclass
class _Walk:
    """One ``wrap`` through an agent graph."""

    done: set[int] = field(default_factory=set)  # the agents wrapped (handoffs may form a cycle)
    seen: set[str] = field(default_factory=set)  # the function tool names met
    hidden: bool = False  # a hand-built Handoff hides its agent (and its tools) until invoked


class OnceOnly:
    """Makes the function tools of an Agents SDK agent once-only per run.

    ``OnceOnly().wrap(agent)`` makes the agent itself (and the agents it hands off to) run its
    function tools through the Call4Agents ledger, and returns it: a call repeated in the same
    run (a resumed ``RunState``, a re-delivered job, a second worker) returns the recorded result
    instead of running again; a call that was interrupted is reported to the model as in doubt.

    Args:
        ledger: the ledger to record in; default ``c4a.init()``'s.
        run_id: the run id when neither the session nor the run context names one: a string, or
            a function of the ``RunContextWrapper`` returning one.
        tools: options per tool name (``EffectOptions`` or a dict of its fields), e.g.
            ``{"lookup": {"kind": "read"}, "refund": {"approval": True}}``.
        default: options for every tool not named in ``tools``.
        trust_state_approvals: honour a plain ``state.approve(item)`` for a call the ledger asked
            about. Set False to accept only answers recorded in the ledger (``once.approve``,
            ``call4agents approve``), so whoever can edit a saved state cannot approve anything.
        budget: a ``c4a.Budget`` for each run of the wrapped agents, counted in the ledger under
            the run id: tool calls, model requests (counted at the agent's ``on_llm_start``
            hook), tokens and cost (from each response's ``Usage``), a deadline. Past the soft
            threshold the agent's instructions carry a wrap-up note; a hard limit ends the run
            with ``c4a.BudgetExceeded`` out of ``Runner.run``. Inside a run opened with
            ``c4a.run(..., budget=...)`` around ``Runner.run`` (or a parent agent's run), each
            call counts against that budget as well as this one.
        escalate_on: outcomes that end the run as escalated (``c4a.Escalated``, with a hand-off)
            instead of going back to the model: ``"in_doubt"`` (a call may or may not have run),
            ``"denied"`` (a recorded no), ``"budget"`` (any hard limit of the budget). Added to
            every tool's ``EffectOptions.escalate_on`` (which may also be given per tool in
            ``tools=``); ``"budget"`` covers model requests too.
        trigger: what started the run: ``"user"``, ``"schedule"``, ``"webhook"``; the ledger
            records ``"retry"`` itself when the run had recorded actions before. The run's first
            model request in this process opens it, the agent's final output completes it.
    """

    def __init__(
        self,
        *,
        ledger: Ledger | None = None,
        run_id: RunIdSource = None,
        tools: ToolOptions | None = None,
        default: EffectOptions | None = None,
        trust_state_approvals: bool = True,
        budget: Budget | None = None,
        escalate_on: Iterable[str] = (),
        trigger: Trigger | None = None,
    ) -> None:
        self._shared = OnceOnlySettings.check(
            ledger=ledger,
            tools=tools,
            default=default,
            budget=budget,
            escalate_on=escalate_on,
            trigger=trigger,
            run_id=run_id,
        )
        self.controls = RunControls(self._shared, options=self._options_of)
        self.trust_state_approvals = trust_state_approvals

    def _options_of(self, tool: str) -> EffectOptions:
        return options_for(tool, self._shared.tools, self._shared.default)

    # -- wrapping ---------------------------------------------------------------------------------

    def wrap(self, agent: TAgent) -> TAgent:
        """Make ``agent`` (and the agents it hands off to) once-only, in place; returns ``agent``.

        The SDK's identity checks keep holding: ``result.last_agent is agent``, ``ctx.agent is
        agent``, the same handoff targets and the same tool objects, and two agents equal bare
        (``==``) stay equal when this ``OnceOnly`` wrapped both. Each function tool's
        ``on_invoke_tool`` (and ``needs_approval`` when a call may need a yes) now goes through
        the ledger; the agent's ``hooks`` count model requests and its ``instructions`` add the
        budget's wrap-up note when due, around the agent's own hooks and instructions. Wrapping
        again (with this or another ``OnceOnly``) changes nothing. The change is for good: a
        later run of the same agent, or of another agent holding the same tool objects, goes
        through the ledger too. Agents reached through ``handoff(agent, ...)`` objects are
        wrapped the same way and the ``Handoff`` keeps its own settings; a hand-built
        ``Handoff`` that shows no agent has the agent it returns wrapped when it is invoked.
        """
        walk = _Walk()
        self._wrap_agent(agent, walk)
        unknown = sorted(set(self._shared.tools) - walk.seen)
        if unknown and not walk.hidden:  # a hand-built Handoff's tools show only later
            warn_once(
                f"oa-unknown-{unknown}",
                f"OnceOnly(tools=...) names {unknown}, which no function tool of {agent.name!r} "
                "or its handoff agents has; check the spelling (tool names as the model sees them)",
            )
        return agent

    def tool(self, tool: FunctionTool, options: EffectOptions | None = None) -> FunctionTool:
        """One function tool made once-only (a copy); also usable as a decorator over
        ``@function_tool``."""
        if not isinstance(tool, FunctionTool):
            raise ConfigurationError(
                f"OnceOnly.tool takes a FunctionTool (from @function_tool), not {type(tool)!r}"
            )
        per_tool: ToolOptions = {tool.name: options} if options is not None else self._shared.tools
        chosen = self.controls.tool_options(options_for(tool.name, per_tool, self._shared.default))
        if _tools.is_wrapped(tool) or not chosen.recorded:
            return tool
        return _tools.build(self, tool, chosen)

    def _wrap_agent(self, agent: Agent[Any], walk: _Walk) -> None:
        if id(agent) in walk.done:
            return
        walk.done.add(id(agent))
        for tool in agent.tools:
            self._wrap_tool(tool, walk.seen)
        # Model requests are counted, and the wrap-up note shown, in the SDK's own way.
        agent.hooks = hooks_for(self.controls, agent)
        agent.instructions = instructions_for(self.controls, agent)
        for item in agent.handoffs:
            if isinstance(item, Agent):
                self._wrap_agent(item, walk)
            elif (target := _handoffs.target(item)) is not None:
                self._wrap_agent(target, walk)
            else:
                walk.hidden = True
                _handoffs.wrap_on_arrival(item, self._wrap_arrived)

    def _wrap_arrived(self, agent: Agent[Any]) -> None:
        # The agent a hand-built Handoff returned: wrapped as it arrives (nothing if it was).
        self._wrap_agent(agent, _Walk())

    def _wrap_tool(self, tool: Tool, seen: set[str]) -> None:
        if not isinstance(tool, FunctionTool) or _tools.is_wrapped(tool):
            return
        seen.add(tool.name)
        if _tools.passes_through(tool, configured=tool.name in self._shared.tools):
            if _tools.is_agent_tool(tool):
                _tools.take_invoker(tool, _tools.build_agent_tool(self, copy.copy(tool)))
            return
        options = self.options_for(tool.name)
        if options.recorded:
            _tools.take_invoker(tool, _tools.build(self, copy.copy(tool), options))

    # -- run ids and sessions ---------------------------------------------------------------------

    def session(self, session: Session) -> Session:
        """``session`` unchanged, except that runs using it take its ``session_id`` as run id."""
        return RunIdSession(session)

    @property
    def run_id_source(self) -> RunIdSource:
        return self._shared.run_id

    def run_id_for(self, wrapper: RunContextWrapper[Any], tool: str) -> str:
        """The run id; raises ConfigurationError (how to fix it) when the run has none."""
        return require_run_id(wrapper, self._shared.run_id, tool)

    def keyed(
        self,
        options: EffectOptions,
        tool: str,
        arguments: Mapping[str, Any],
        run_id: str,
        call_id: str | None,
    ) -> Action:
        """Key one call of run ``run_id`` (an approval policy function runs here)."""
        return action_for(
            tool, arguments, options, run_id=run_id, call_id=call_id, ledger=self._shared.ledger
        )

    def action(
        self,
        options: EffectOptions,
        tool: str,
        arguments: Mapping[str, Any],
        wrapper: RunContextWrapper[Any],
        call_id: str | None,
    ) -> Action:
        """Key one call in its run's scope; raises ConfigurationError when the run has no id."""
        run_id = self.run_id_for(wrapper, tool)
        with self.controls.scope(run_id, options.ledger).enter():
            return self.keyed(options, tool, arguments, run_id, call_id)

    def options_for(self, tool: str) -> EffectOptions:
        """The options ``tool``'s calls run with: ``tools[tool]`` over ``default``, plus
        ``escalate_on``."""
        return self.controls.tool_options(
            options_for(tool, self._shared.tools, self._shared.default)
        )

    def ledger_for(self, options: EffectOptions) -> LedgerCore:
        return self._shared.ledger or options.ledger or default_ledger()

    # -- approvals --------------------------------------------------------------------------------

    def may_need_approval(self, tool: FunctionTool, options: EffectOptions) -> bool:
        """Whether a call of ``tool`` can ever need a yes, judged when the tool is wrapped."""
        if options.approval is not None:
            return bool(options.approval) or bool(tool.needs_approval)
        if tool.needs_approval:
            return True
        try:
            return options.kind in self.ledger_for(options).approval_for
        except ConfigurationError:
            return False  # no ledger open yet: no class policy to apply

    async def prepare_approval(
        self, action: Action, tool: FunctionTool, ctx: ToolContext[Any]
    ) -> None:
        """Mark a call that needs a yes, and carry the SDK's yes for it into the ledger.

        Judged without asking the tool's own policy again: the SDK asked it (through the
        wrapped ``needs_approval``) just before this call, unless it holds a decision for it.
        """
        ledger_asks = action.needs_approval  # the ledger's policy: tool options, approval_for
        own_may_ask = _approval.own_policy_may_ask(tool)
        if not ledger_asks and not own_may_ask:
            return  # nobody asks about this tool's calls
        if _approval.sdk_decision(tool, ctx) is True:
            action.needs_approval = True
            if self.trust_state_approvals:
                await asyncio.to_thread(_approval.carry_state_yes, action, ledger_asks=ledger_asks)
        elif not ledger_asks:
            # The wrapped policy just said no question: either the tool's own policy asks for
            # no yes, or the ledger holds a person's answer for exactly this call (its ticket's
            # yes is spent or its no refuses, as the gate does for the ledger's own policy).
            # An open question here would mean the SDK ran a call it had no yes for: the gate
            # refuses it rather than run it past the ledger.
            action.needs_approval = await asyncio.to_thread(_approval.asked, action)

    def approve(
        self,
        state: RunState[Any, Any],
        item: ToolApprovalItem,
        *,
        by: str,
        reason: str | None = None,
        run_id: str | None = None,
    ) -> ApprovalRequest | None:
        """A person's yes, recorded in the ledger for exactly this call and given to ``state``.

        The run id is found from the ledger's open ticket for the call; pass ``run_id`` when the
        same call waits in several runs. Returns the ticket, or None if the call already ran.
        """
        decided = self._decide(item, by=by, reason=reason, run_id=run_id, yes=True)
        state.approve(item)
        return decided

    def reject(
        self,
        state: RunState[Any, Any],
        item: ToolApprovalItem,
        *,
        by: str,
        reason: str | None = None,
        run_id: str | None = None,
    ) -> ApprovalRequest | None:
        """A person's no, recorded in the ledger and given to ``state``; the model is told."""
        decided = self._decide(item, by=by, reason=reason, run_id=run_id, yes=False)
        message = f"{item.tool_name} was not run: {by} said no" + (f" ({reason})" if reason else "")
        state.reject(item, rejection_message=message + ". Do not retry it.")
        return decided

    def _decide(
        self, item: ToolApprovalItem, *, by: str, reason: str | None, run_id: str | None, yes: bool
    ) -> ApprovalRequest | None:
        action = self._item_action(item, run_id)
        ledger = action.ledger
        now = time.time()
        for ticket in _approval.tickets_for(action):
            # A no also reaches a yes not yet spent: a later no wins (another copy of the state).
            undecided = ticket.state == "pending" or (not yes and ticket.state == "approved")
            if undecided and ticket.expires_at > now:
                decide = ledger.approve if yes else ledger.deny
                return decide(ticket.ticket, by=by, reason=reason)
        # No open ticket (it expired, or the call was never asked about): decide the call itself.
        decide_action = ledger.approve_action if yes else ledger.deny_action
        return decide_action(action, by=by, reason=reason)

    def _item_action(self, item: ToolApprovalItem, run_id: str | None) -> Action:
        name = item.tool_name or ""
        arguments = _tools.parse_arguments(item.arguments or "")
        if arguments is None:
            raise ConfigurationError(f"the approval item for {name} has no JSON object arguments")
        options = self.options_for(name)

        def keyed(run: str) -> Action:
            return action_for(
                name,
                arguments,
                options,
                run_id=run,
                call_id=item.call_id,
                ledger=self._shared.ledger,
            )

        chosen = run_id or self._known_run_id() or self._run_of_open_ticket(name, options, keyed)
        action = keyed(chosen)
        action.needs_approval = True
        return action

    def _known_run_id(self) -> str | None:
        run = current_run()
        if run is not None:
            return run.run_id
        return self._shared.run_id if isinstance(self._shared.run_id, str) else None

    def _run_of_open_ticket(
        self, name: str, options: EffectOptions, keyed: Callable[[str], Action]
    ) -> str:
        tool = options.name or name
        ledger = self.ledger_for(options)
        # Pending or approved and not yet spent: a later no must find a yes's ticket too.
        open_ = [t for t in ledger.approvals() if t.tool == tool and t.state in _UNSPENT]
        runs = {t.run_id for t in open_ if keyed(t.run_id).key == t.key}
        if len(runs) == 1:
            return runs.pop()
        why = "no open ticket for it" if not runs else f"it waits in several runs {sorted(runs)}"
        raise ConfigurationError(
            f"cannot tell which run this {name} call belongs to ({why}): pass run_id="
        )

    # -- MCP --------------------------------------------------------------------------------------

    def mcp_meta(self, context: MCPToolMetaContext) -> dict[str, Any]:
        """A ``tool_meta_resolver`` for the SDK's MCP servers: the call's idempotency key.

        ``MCPServerStreamableHttp(params, tool_meta_resolver=once.mcp_meta)`` sends the key in
        ``_meta["io.call4agents/idempotency-key"]``; a server with ``call4agents_mcp.OnceOnly``
        answers a repeat of the same call in the same run with its first result.
        """
        try:
            from call4agents_mcp import KEY_META, idempotency_key
        except ImportError as exc:
            raise ImportError(
                'OnceOnly.mcp_meta needs call4agents-mcp: pip install "call4agents-core[mcp]"'
            ) from exc
        run_id = require_run_id(context.run_context, self._shared.run_id, context.tool_name)
        key = idempotency_key(context.tool_name, context.arguments, run_id=run_id)
        return {KEY_META: key}
