"""``OnceOnly``: the Pydantic AI capability that runs every tool call through the ledger."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Collection, Mapping, Sequence
from contextlib import nullcontext
from types import MappingProxyType
from typing import Any

from pydantic_ai import RunContext, UserPromptNode
from pydantic_ai.capabilities import (
    AbstractCapability,
    AgentNode,
    NodeResult,
    WrapModelRequestHandler,
    WrapNodeRunHandler,
    WrapRunHandler,
    WrapToolExecuteHandler,
)
from pydantic_ai.exceptions import ToolFailed, UserError
from pydantic_ai.messages import ModelResponse, ToolCallPart
from pydantic_ai.models import ModelRequestContext
from pydantic_ai.run import AgentRunResult
from pydantic_ai.tools import ToolDefinition

import call4agents as c4a
from call4agents import (
    Budget,
    BudgetExceeded,
    Call4AgentsError,
    EffectOptions,
    Ledger,
    OutcomeUnknown,
    ResultNotStored,
)
from call4agents.integration import (
    Action,
    OnceOnlySettings,
    Trigger,
    action_for,
    arun_tool,
    current_run,
    ends_run,
    escalate_by_policy,
    note_unrecorded,
    options_for,
    step,
    with_escalate_on,
)
from call4agents.integration import RunContext as C4ARun

from . import _approvals, _outcomes, _run_controls, _steps
from ._run_id import run_id_of

_NO_TOOLS: Mapping[str, EffectOptions | Mapping[str, Any]] = MappingProxyType({})
_WRITE = EffectOptions()


class OnceOnly(AbstractCapability[Any]):
    """Every tool call of the agent happens at most once per conversation.

    ``Agent(model, tools=[...], capabilities=[OnceOnly()])``, or for one run only
    ``agent.run(..., capabilities=[OnceOnly()])`` (a run's ``OnceOnly`` replaces the agent's).

    Args:
        ledger: the ledger to record in; default: the one opened with ``c4a.init()``.
        tools: per-tool options by the tool's name as the model sees it, as ``EffectOptions`` or
            a dict of its fields laid over ``default``, e.g. ``{"lookup": {"kind": "read"}}``.
        default: options for every tool not named in ``tools`` (default: a ``"write"`` effect).
        budget: limits on the run (``c4a.Budget``): tool calls, model requests, cost from the
            run's token usage, a deadline. Counted in the ledger under the conversation id, so a
            resumed conversation or a second worker continues the count. Without one, the run
            counts against the budget of an enclosing ``c4a.run(...)`` (or a parent agent's);
            with one, it counts against both.
        escalate_on: outcomes that end the run as escalated to a person (``c4a.Escalated``,
            with a hand-off) instead of going back to the model: ``"in_doubt"``, ``"denied"``
            (a "no" in the ledger or in ``DeferredToolResults``), ``"budget"`` (a tool call or
            a model request refused by the budget). Added to every tool's
            ``EffectOptions.escalate_on``, which may also be given per tool in ``tools=``.
        trigger: what started the run: ``"user"``, ``"schedule"``, ``"webhook"``; the ledger
            records ``"retry"`` itself when the conversation had recorded actions before.

    The run id is the run's ``conversation_id``; ``scope="call"`` tools add the model's
    ``tool_call_id``. The whole run happens inside ``c4a.run(conversation_id)``, so tools and
    your own hooks can call ``c4a.escalate(...)`` or ``c4a.budget_usage()``. A tool's own
    exception reaches Pydantic AI as it would without this capability, once the ledger recorded
    it. Calls that are in doubt or still running elsewhere go back to the model as a
    ``ModelRetry`` that says so (counted by the tool's ``retries=``), a denied call as Pydantic
    AI's ``ToolDenied``; a spent budget (``c4a.BudgetExceeded``) and an escalation
    (``c4a.Escalated``) end the run and are raised out of ``agent.run(...)``.
    """

    # A default id declares "one per agent": a run's OnceOnly replaces the agent's outright
    # instead of nesting inside it, which would make the inner one wait on the outer's lease.
    id: str | None = "call4agents_once_only"

    def __init__(
        self,
        *,
        ledger: Ledger | None = None,
        tools: Mapping[str, EffectOptions | Mapping[str, Any]] = _NO_TOOLS,
        default: EffectOptions = _WRITE,
        budget: Budget | None = None,
        escalate_on: Collection[str] = (),
        trigger: Trigger | None = None,
    ) -> None:
        settings = OnceOnlySettings.check(
            ledger=ledger,
            tools=tools,
            default=default,
            budget=budget,
            escalate_on=escalate_on,
            trigger=trigger,
        )
        self._shared = settings
        self.ledger, self.trigger, self.budget = settings.ledger, settings.trigger, settings.budget
        self.escalate_on = settings.escalate_on
        # The core escalates by policy where each call runs, so the policy goes in the options.
        self.default = with_escalate_on(settings.default, self.escalate_on)
        self.tools: Mapping[str, EffectOptions] = MappingProxyType(
            {name: with_escalate_on(o, self.escalate_on) for name, o in settings.tools.items()}
        )
        self._reset()

    def _reset(self) -> None:
        """State of one run (``for_run`` gives each run its own copy)."""
        self._answered_by: dict[str, str] = {}  # who answered each deferred call
        self._c4a_run: C4ARun | None = None  # the c4a.run context this run entered
        self._account: _run_controls.Account | None = None
        self._owns_account = False
        self._ending: BaseException | None = None  # raised once the running calls are done

    def __repr__(self) -> str:
        budget = f", budget={self.budget!r}" if self.budget is not None else ""
        policy = f", escalate_on={sorted(self.escalate_on)!r}" if self.escalate_on else ""
        return f"OnceOnly(ledger={self.ledger!r}, tools={sorted(self.tools)!r}{budget}{policy})"

    @classmethod
    def combine(cls, capabilities: Sequence[AbstractCapability[Any]]) -> AbstractCapability[Any]:
        raise UserError(
            "an agent got more than one call4agents OnceOnly capability: give it one, with every "
            "tool's options in OnceOnly(tools={...}) (a run's OnceOnly replaces the agent's)"
        )

    def options(self, tool: str) -> EffectOptions:
        """The options a tool runs with: its entry in ``tools``, else ``default``."""
        return self.tools.get(tool) or options_for(tool, None, self.default)

    async def for_run(self, ctx: RunContext[Any]) -> OnceOnly:
        run = copy.copy(self)
        run._reset()
        return run

    # -- the run as a whole: c4a.run(conversation_id), and how it ends ------------------------

    async def wrap_run(
        self, ctx: RunContext[Any], *, handler: WrapRunHandler
    ) -> AgentRunResult[Any]:
        """Run the whole agent run inside ``c4a.run(conversation_id, budget=...)``.

        Pydantic AI carries context variables set here into the run body, its tool tasks and
        delegate agents started from tools, which then count against this run's budget.
        """
        _refuse_temporal_workflow(ctx)
        whole = _run_controls.scope(
            ctx.conversation_id, self.ledger, self.budget, whole=True, trigger=self.trigger
        )
        # `async with`: the run's start and end are recorded off the event loop's thread.
        async with whole:
            with _run_controls.account_for(ctx.usage) as (account, owns):
                self._c4a_run, self._account, self._owns_account = current_run(), account, owns
                result = await handler()
                await self._settle()
                await self._end_if_ended()
                return result

    async def wrap_node_run(
        self, ctx: RunContext[Any], *, node: AgentNode[Any], handler: WrapNodeRunHandler[Any]
    ) -> NodeResult[Any]:
        """After each step: count what delegates spent, and end the run if a call ended it."""
        try:
            result = await handler(node)
        except Exception:
            await self._end_if_ended()  # the ending is why the step failed: the caller sees it
            raise
        with self._scope(ctx):
            await self._settle()
        await self._end_if_ended()
        return result

    async def wrap_model_request(
        self,
        ctx: RunContext[Any],
        *,
        request_context: ModelRequestContext,
        handler: WrapModelRequestHandler,
    ) -> ModelResponse:
        """Count each model request in the ledger before it is made, and its usage after."""
        await self._end_if_ended()
        with self._scope(ctx), step(ctx.conversation_id, ctx.run_step) as turn:
            response = await self._request(request_context, handler)
            turn.finish(_steps.figures(response))
            return response

    async def _request(
        self, request_context: ModelRequestContext, handler: WrapModelRequestHandler
    ) -> ModelResponse:
        """The request, counted against the run's budget when it has one."""
        if not _run_controls.budgeted():
            return await handler(request_context)
        await self._settle()
        try:
            request_context = await _run_controls.before_request(request_context)
        except BudgetExceeded as exc:
            await self._escalate(exc)
            raise
        try:
            response = await handler(request_context)
        except BaseException:
            self._counted(None)
            raise
        self._counted(response)
        await _run_controls.after_response(response)
        return response

    def _counted(self, response: ModelResponse | None) -> None:
        if self._account is not None:
            self._account.counted(response)

    def _scope(self, ctx: RunContext[Any]) -> Any:
        """The run's ``c4a.run`` context, entered again where Pydantic AI did not carry it."""
        if self._c4a_run is not None and current_run() is self._c4a_run:
            return nullcontext()
        return _run_controls.scope(ctx.conversation_id, self.ledger, self.budget)

    async def _settle(self) -> None:
        if self._owns_account and self._account is not None and _run_controls.budgeted():
            try:
                await _run_controls.settle(self._account)
            except BudgetExceeded as exc:
                await self._escalate(exc)
                raise

    async def _escalate(self, exc: BaseException) -> None:
        """A budget cut met outside a tool call (a model request, delegates' usage counted at
        a step boundary) hands the run over when ``escalate_on`` says so; a tool call's own
        outcomes are escalated by the core where the call runs."""
        if self.escalate_on:
            await asyncio.to_thread(escalate_by_policy, exc, self.escalate_on, ledger=self.ledger)

    async def _end_if_ended(self) -> None:
        """Raise the budget cut or escalation a call of this run met, once its step is over."""
        ending = self._ending
        if ending is not None:
            raise await asyncio.to_thread(_run_controls.refreshed, ending, self.ledger)

    async def before_node_run(
        self, ctx: RunContext[Any], *, node: AgentNode[Any]
    ) -> AgentNode[Any]:
        """A continuation's answers: note who gave them, and record every "no" in the ledger."""
        if isinstance(node, UserPromptNode) and node.deferred_tool_results is not None:
            results = node.deferred_tool_results
            self._answered_by.update(results.answered_by)
            denials = await _approvals.record_denials(
                ctx, results, lambda call: self._history_action(ctx, call)
            )
            if "denied" in self.escalate_on and denials:
                # A "no" in the answers: Pydantic AI would tell the model; a person decides.
                action, refusal = denials[0]
                await asyncio.to_thread(
                    escalate_by_policy, refusal, self.escalate_on, action=action
                )
        return node

    async def wrap_tool_execute(
        self,
        ctx: RunContext[Any],
        *,
        call: ToolCallPart,
        tool_def: ToolDefinition,
        args: dict[str, Any],
        handler: WrapToolExecuteHandler,
    ) -> Any:
        if self._ending is not None:
            raise ToolFailed(_run_controls.NOT_STARTED)  # a sibling call ended the run
        with self._scope(ctx):
            try:
                return await self._execute(ctx, call, tool_def.name, args, handler)
            except Exception as exc:
                if not ends_run(exc):
                    raise
                # Calls running beside this one finish first (Pydantic AI would cancel them
                # half-way, leaving them in doubt); the run ends after this step.
                self._ending = self._ending or exc
                raise ToolFailed(_run_controls.ending_text(exc)) from None

    async def _execute(
        self,
        ctx: RunContext[Any],
        call: ToolCallPart,
        tool: str,
        args: dict[str, Any],
        handler: WrapToolExecuteHandler,
    ) -> Any:
        options = self.options(tool)
        if not options.recorded:
            note_unrecorded(options)  # a read is the evidence behind the run's completion
            return await handler(args)
        try:
            action = self._action(ctx, call, tool, args, options)
        except Call4AgentsError as exc:
            return _give_back(_outcomes.refused(exc))
        if ctx.tool_call_approved:
            by = self._answered_by.get(call.tool_call_id) or _approvals.DEFAULT_BY
            await _approvals.record_yes(ctx, call, action, by)
        return await self._run(action, args, handler)

    def _action(
        self,
        ctx: RunContext[Any],
        call: ToolCallPart,
        tool: str,
        args: dict[str, Any],
        options: EffectOptions,
    ) -> Action:
        return action_for(
            tool,
            args,
            options,
            run_id=run_id_of(ctx, tool),
            call_id=call.tool_call_id,
            ledger=self.ledger,
        )

    def _history_action(self, ctx: RunContext[Any], call: ToolCallPart) -> Action | None:
        """The action of a call as the history holds it (for a "no", which never runs)."""
        options = self.options(call.tool_name)
        if not options.recorded:
            return None
        try:
            return self._action(ctx, call, call.tool_name, call.args_as_dict(), options)
        except (Call4AgentsError, TypeError, ValueError):
            return None  # no stable key from the raw arguments: nothing to refuse in the ledger

    async def _run(
        self, action: Action, args: dict[str, Any], handler: WrapToolExecuteHandler
    ) -> Any:
        tool = _outcomes.ToolCall()

        async def execute() -> Any:
            try:
                tool.value = await handler(args)
            except BaseException as exc:
                tool.raised = exc
                if _outcomes.timed_out(exc):
                    # A tool timeout may leave the tool running: recorded as in doubt.
                    raise OutcomeUnknown(f"{action.tool} timed out and may still act") from exc
                raise
            tool.returned = True
            return tool.value

        try:
            return await arun_tool(action, execute)
        except BaseException as exc:
            if ends_run(exc):
                raise  # a budget cut or an escalation: the run ends, it is not the tool's result
            own = tool.own(exc)
            if own is None:
                return self._ledger_said(exc, tool)
        # The ledger recorded it; Pydantic AI handles it as it would without us (a ModelRetry
        # spends a retry, a timeout is retried, anything else ends the run). Raised here, not
        # in the except clause, so its context is the tool's own, as bare.
        raise own

    @staticmethod
    def _ledger_said(exc: BaseException, tool: _outcomes.ToolCall) -> Any:
        """The tool result for an outcome of the ledger's own (not the tool's exception)."""
        if isinstance(exc, ResultNotStored) and tool.returned:
            return tool.value  # it ran just now: Pydantic AI gets the value as it would bare
        if isinstance(exc, c4a.ApprovalRequired):
            raise _approvals.deferral(exc) from None
        if isinstance(exc, Call4AgentsError):
            return _give_back(_outcomes.refused(exc))
        raise exc


def _refuse_temporal_workflow(ctx: RunContext[Any]) -> None:
    """Refuse to run in a Temporal workflow, where the capability's hooks cannot work.

    With ``TemporalDurability`` the agent loop, and so every capability hook, runs in workflow
    code, which must not do I/O: Temporal refuses the threads the ledger's calls run in (the
    workflow task would fail, and be retried, without end), and the ledger's answers would differ
    on replay. Pydantic AI's Temporal plugin fails the workflow on a ``UserError``, so this says
    why, once, instead. (On DBOS the workflow is ordinary code, and the capability composes.)
    """
    try:
        from pydantic_ai.durable_exec import BaseDurabilityCapability
    except ImportError:  # a Pydantic AI 2 release from before durability capabilities
        return
    agent = getattr(ctx, "agent", None)
    durability = BaseDurabilityCapability.from_agent(agent) if agent is not None else None
    if durability is None or durability.engine_name != "Temporal":
        return
    if durability.in_durable_context:
        raise UserError(
            "call4agents_pydantic_ai.OnceOnly cannot run in a Temporal workflow (its hooks would "
            "do I/O in workflow code): remove it from this TemporalDurability agent, and run the "
            "worker with call4agents_jobs.temporal.OnceOnly and the tool's side effect under "
            "@c4a.effect"
        )


def _give_back(outcome: Any) -> Any:
    """Raise a ModelRetry (a tool error counted by the tool's retries); return a ToolDenied."""
    if isinstance(outcome, BaseException):
        raise outcome
    return outcome
