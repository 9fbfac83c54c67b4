"""Run controls on an Agents SDK run: budgets, the wrap-up note, and endings that end the run.

- Tool calls: each call of a wrapped tool runs inside ``c4a.run(<run id>, budget=...)``, so the
  ledger checks and counts it in the claim's own transaction, and ``c4a.escalate()`` inside the
  tool knows its run and ledger. A run the caller opened with a budget applies too: the
  agent's calls count against it and against the agent's own budget, as a nested agent's do.
- Model requests: the wrapped agent's ``hooks`` (the SDK's ``AgentHooks``) count each request
  in ``on_llm_start``, before it is sent, and add the response's own ``Usage`` tokens in
  ``on_llm_end``; the cost is priced by ``Budget(token_prices=...)``. The same two hooks open
  and end each request's step span (``_steps``).
- The wrap-up note: the wrapped agent's instructions become a function (the SDK's dynamic
  instructions) that adds ``BudgetUsage.wrap_up_note()`` once the soft threshold is passed.
- Endings: ``BudgetExceeded`` and ``Escalated`` end the run. The SDK turns whatever a tool raises
  into ``UserError("Error running tool ...")`` unless it is one of its own ``AgentsException``s,
  so they leave ``Runner.run`` as subclasses of both: ``except c4a.BudgetExceeded`` catches them,
  and the SDK attaches ``exc.run_data`` as it does to its own ``MaxTurnsExceeded``.
- Escalation policy: ``escalate_on`` is added to every wrapped tool's ``EffectOptions``, so the
  core escalates a denied, in-doubt or budget-cut tool call where it runs; a model request cut
  by the budget is escalated here, with the core's ``escalate_by_policy``.
"""

from __future__ import annotations

import asyncio
import copy
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar, cast

from agents import AgentHooks, RunContextWrapper, Usage
from agents.exceptions import AgentsException

import call4agents as c4a
from call4agents import Budget, ConfigurationError, EffectOptions
from call4agents.integration import (
    OnceOnlySettings,
    arun_finished,
    count_model_request,
    current_run,
    ends_run,
    escalate_by_policy,
    note_unrecorded,
    record_model_usage,
    run_continues,
    run_part,
    with_escalate_on,
)

from . import _steps
from ._run_id import RunIdSource, resolve_run_id

if TYPE_CHECKING:
    from agents import Agent, Tool
    from agents.items import ModelResponse, TResponseInputItem
    from agents.run_context import AgentHookContext

    from call4agents.integration import LedgerCore

T = TypeVar("T")

# Set on the hooks OnceOnly installs, so wrapping an agent twice counts each request once.
_MARK = "__call4agents_run_controls__"


class BudgetExceeded(c4a.BudgetExceeded, AgentsException):
    """``c4a.BudgetExceeded`` leaving an Agents SDK run, as the SDK's own run endings do."""


class Escalated(c4a.Escalated, AgentsException):
    """``c4a.Escalated`` leaving an Agents SDK run, as the SDK's own run endings do."""


def sdk_ending(exc: BaseException) -> AgentsException:
    """The same ending as an ``AgentsException``, so the SDK lets it out of the run unchanged."""
    if isinstance(exc, AgentsException):
        return exc  # already one (an agent used as a tool ended its own run)
    ending: AgentsException
    if isinstance(exc, c4a.Escalated):
        ending = Escalated(exc.handoff)
    elif isinstance(exc, c4a.BudgetExceeded):
        ending = BudgetExceeded(
            run_id=exc.run_id, tool=exc.tool, reason=exc.reason, detail=exc.detail
        )
    else:
        raise TypeError(f"{type(exc).__name__} does not end a run")
    return ending.with_traceback(exc.__traceback__)


@dataclass(frozen=True)
class Scope:
    """Which run a step belongs to, with whose budget it is counted against."""

    run_id: str
    ledger: LedgerCore | None
    budget: Budget | None  # None: the enclosing run's budget (if any) applies

    def enter(self) -> c4a.run:
        return run_part(self.run_id, ledger=self.ledger, budget=self.budget)

    def call(self, fn: Callable[[], T]) -> T:
        with self.enter():
            return fn()


class RunControls:
    """One ``OnceOnly``'s budget and escalation policy, applied to the runs of its agents."""

    def __init__(
        self,
        settings: OnceOnlySettings,
        options: Callable[[str], EffectOptions] | None = None,
    ) -> None:
        self.budget = settings.budget
        self.escalate_on = settings.escalate_on
        self.ledger = settings.ledger
        self.run_id: RunIdSource = settings.run_id
        self.trigger = settings.trigger
        self.options = options

    # -- the run as a whole: its trigger, reads, and completion -----------------------------------

    def step_started(self, wrapper: RunContextWrapper[Any]) -> None:
        """A model request: the run's first in this process opens its notes."""
        run_id = resolve_run_id(wrapper, self.run_id)
        if run_id is not None:
            run_continues(run_id, ledger=self.ledger, trigger=self.trigger)

    def tool_started(self, tool: Tool) -> None:
        """A tool the ledger does not record (a read): counted for the run's summary."""
        if self.options is not None:
            found = self.options(tool.name)
            if not found.recorded:
                note_unrecorded(found)

    async def completed(self, wrapper: RunContextWrapper[Any]) -> None:
        """The agent produced its final output: the run completed."""
        run_id = resolve_run_id(wrapper, self.run_id)
        if run_id is not None:
            await arun_finished(run_id)

    # -- scopes -----------------------------------------------------------------------------------

    def scope(self, run_id: str, ledger: LedgerCore | None = None) -> Scope:
        """The scope of one step of run ``run_id``, judged in the caller's context."""
        outer = current_run()
        ledger = self.ledger or ledger or (outer.ledger if outer is not None else None)
        # Inside an enclosing run's budget this one applies as well: both are checked.
        return Scope(run_id, ledger, self.budget)

    def budget_scope(self, wrapper: RunContextWrapper[Any]) -> Scope | None:
        """The scope model requests count in, or None when no budget applies to this run."""
        outer = current_run()
        if self.budget is None and (outer is None or outer.budget is None):
            return None  # nothing to count: no ledger work at all
        run_id = resolve_run_id(wrapper, self.run_id)
        if run_id is None:
            raise ConfigurationError(
                "OnceOnly(budget=...) counts this run's model requests in the ledger, but the run "
                "has no stable id to count them under. Give it one: Runner.run(..., session="
                'once.session(SQLiteSession("<id>"))), or a context with call4agents_run_id, or '
                '`with c4a.run("<id>"):` around Runner.run, or OnceOnly(run_id=...).'
            )
        return self.scope(run_id)

    # -- model requests ---------------------------------------------------------------------------

    async def before_request(self, wrapper: RunContextWrapper[Any]) -> None:
        """Check the budget and count one model request; a hard limit ends the run."""
        scope = self.budget_scope(wrapper)
        if scope is None:
            return
        try:
            await asyncio.to_thread(scope.call, count_model_request)
        except Exception as exc:
            if ends_run(exc):
                await self.end_run(exc, scope.ledger)
            raise

    async def after_response(self, wrapper: RunContextWrapper[Any], usage: Usage) -> None:
        """Add the response's tokens (priced by the budget) to the run's counters."""
        scope = self.budget_scope(wrapper)
        if scope is None:
            return
        tokens = (max(usage.input_tokens, 0), max(usage.output_tokens, 0))
        await asyncio.to_thread(scope.call, lambda: record_model_usage(*tokens))

    async def wrap_up_note(self, wrapper: RunContextWrapper[Any]) -> str | None:
        """The line to show the model once the soft threshold is passed; None before it."""
        scope = self.budget_scope(wrapper)
        if scope is None:
            return None
        usage = await asyncio.to_thread(scope.call, c4a.budget_usage)
        return usage.wrap_up_note()

    # -- tool options and endings -----------------------------------------------------------------

    def tool_options(self, options: EffectOptions) -> EffectOptions:
        """``options`` with ``escalate_on`` added to the tool's own, so the core escalates a
        denied, in-doubt or budget-cut tool call where it runs."""
        return with_escalate_on(options, self.escalate_on)

    async def end_run(self, exc: BaseException, ledger: LedgerCore | None = None) -> NoReturn:
        """Raise ``exc`` (a run ending) as the SDK's kind. A budget cut met outside a tool call
        (a model request, a nested agent's run) is escalated first when ``escalate_on`` says so;
        a tool call's own outcomes were escalated by the core already."""
        if self.escalate_on:
            try:
                await asyncio.to_thread(
                    escalate_by_policy, exc, self.escalate_on, ledger=ledger or self.ledger
                )
            except c4a.Escalated as escalated:
                exc = escalated
        raise sdk_ending(exc) from None


class BudgetHooks(AgentHooks[Any]):
    """The wrapped agent's ``hooks``: model requests are counted, then the agent's own hooks run."""

    def __init__(self, controls: RunControls, inner: AgentHooks[Any] | None) -> None:
        self.controls = controls
        self.inner = inner
        setattr(self, _MARK, True)

    # Two agents equal bare (dataclass ==, which the SDK uses, e.g. a handoff to one of two
    # same-named agents) stay equal once the same OnceOnly wrapped both: equal hooks inside.
    def __eq__(self, other: object) -> bool:
        if not isinstance(other, BudgetHooks):
            return NotImplemented
        return self.controls is other.controls and self.inner == other.inner

    def __hash__(self) -> int:
        return hash(id(self.controls))

    def __deepcopy__(self, memo: dict[int, Any]) -> BudgetHooks:
        # A deep copy of the agent (the SDK's items hold agents; a handoff filter may deep-copy
        # them) copies the agent's own hooks; the controls (ledger, budget) are shared, as a
        # ledger connection cannot be copied and a copy counts against the same budget.
        return BudgetHooks(self.controls, copy.deepcopy(self.inner, memo))

    async def on_llm_start(
        self,
        context: RunContextWrapper[Any],
        agent: Agent[Any],
        system_prompt: str | None,
        input_items: list[TResponseInputItem],
    ) -> None:
        self.controls.step_started(context)
        await self.controls.before_request(context)  # raises to end the run before the request
        _steps.started(context, agent, resolve_run_id(context, self.controls.run_id))
        if self.inner is not None:
            await self.inner.on_llm_start(context, agent, system_prompt, input_items)

    async def on_llm_end(
        self, context: RunContextWrapper[Any], agent: Agent[Any], response: ModelResponse
    ) -> None:
        _steps.ended(context, response)
        await self.controls.after_response(context, response.usage)
        if self.inner is not None:
            await self.inner.on_llm_end(context, agent, response)

    async def on_start(self, context: AgentHookContext[Any], agent: Agent[Any]) -> None:
        if self.inner is not None:
            await self.inner.on_start(context, agent)

    async def on_end(self, context: AgentHookContext[Any], agent: Agent[Any], output: Any) -> None:
        await self.controls.completed(context)
        if self.inner is not None:
            await self.inner.on_end(context, agent, output)

    async def on_handoff(
        self, context: RunContextWrapper[Any], agent: Agent[Any], source: Agent[Any]
    ) -> None:
        if self.inner is not None:
            await self.inner.on_handoff(context, agent, source)

    async def on_tool_start(
        self, context: RunContextWrapper[Any], agent: Agent[Any], tool: Tool
    ) -> None:
        self.controls.tool_started(tool)
        if self.inner is not None:
            await self.inner.on_tool_start(context, agent, tool)

    async def on_tool_end(
        self, context: RunContextWrapper[Any], agent: Agent[Any], tool: Tool, result: object
    ) -> None:
        if self.inner is not None:
            await self.inner.on_tool_end(context, agent, tool, result)


Instructions = Callable[[RunContextWrapper[Any], "Agent[Any]"], Any]


def hooks_for(controls: RunControls, agent: Agent[Any]) -> AgentHooks[Any] | None:
    """The hooks of the wrapped ``agent`` (unchanged if it was wrapped already)."""
    if getattr(agent.hooks, _MARK, False):
        return agent.hooks
    return BudgetHooks(controls, agent.hooks)


def instructions_for(controls: RunControls, agent: Agent[Any]) -> Any:
    """The instructions of the wrapped agent: its own, plus the note once it is due."""
    original = agent.instructions
    if isinstance(original, NoteInstructions):
        return original
    return NoteInstructions(controls, original)


class NoteInstructions:
    """The wrapped agent's instructions (the SDK's dynamic kind, an async callable): its own,
    plus the budget's wrap-up note once it is due.

    A callable object rather than a closure so that, as with the hooks, two agents equal bare
    stay equal when the same OnceOnly wrapped both (their own instructions equal).
    """

    def __init__(self, controls: RunControls, original: str | Instructions | None) -> None:
        self.controls = controls
        self.original = original
        # The SDK tells same-named agents apart in a saved RunState by a signature of their
        # fields, where a callable counts by its module and name alone: named after the agent's
        # own instructions, two agents it told apart bare stay apart.
        self.__module__ = __name__
        self.__qualname__ = f"{type(self).__name__}[{_identity_of(original)}]"

    async def __call__(self, context: RunContextWrapper[Any], agent: Agent[Any]) -> str:
        base = await _resolve(self.original, context, agent)
        note = await self.controls.wrap_up_note(context)
        if note is None:
            return cast(str, base)  # None stays None: the SDK sends no instructions then
        return f"{base}\n\n{note}" if base else note

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, NoteInstructions):
            return NotImplemented
        return self.controls is other.controls and self.original == other.original

    def __hash__(self) -> int:
        return hash(id(self.controls))

    def __deepcopy__(self, memo: dict[int, Any]) -> NoteInstructions:
        return NoteInstructions(self.controls, copy.deepcopy(self.original, memo))


def _identity_of(original: object) -> str:
    if original is None or isinstance(original, str):
        return repr(original)
    module = getattr(original, "__module__", type(original).__module__)
    name = getattr(original, "__qualname__", type(original).__qualname__)
    return f"{module}.{name}"


async def _resolve(
    original: str | Instructions | None, context: RunContextWrapper[Any], agent: Agent[Any]
) -> str | None:
    # The same reading the SDK's Agent.get_system_prompt does for a string or a function.
    if original is None or isinstance(original, str):
        return original
    found = original(context, agent)
    if inspect.isawaitable(found):
        found = await found
    return cast("str | None", found)
