"""``OnceOnly``: the Pydantic AI capability that runs every tool call through the ledger."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import fields
from types import MappingProxyType
from typing import Any

from pydantic_ai import RunContext, UserPromptNode
from pydantic_ai.capabilities import AbstractCapability, AgentNode, WrapToolExecuteHandler
from pydantic_ai.exceptions import UserError
from pydantic_ai.messages import ToolCallPart
from pydantic_ai.tools import ToolDefinition

import call4agents as c4a
from call4agents import Call4AgentsError, ConfigurationError, EffectOptions, Ledger, OutcomeUnknown
from call4agents.effect import Action, is_in_doubt_error
from call4agents.integration import action_for, arun_tool, options_for

from . import _approvals, _outcomes
from ._run_id import run_id_of

_NO_TOOLS: Mapping[str, EffectOptions | Mapping[str, Any]] = MappingProxyType({})
_WRITE = EffectOptions()
_OPTION_NAMES = frozenset(f.name for f in fields(EffectOptions))


class OnceOnly(AbstractCapability[Any]):
    """Every tool call of the agent happens at most once per conversation.

    ``Agent(model, tools=[...], capabilities=[OnceOnly()])``, or for one run only
    ``agent.run(..., capabilities=[OnceOnly()])`` (a run's ``OnceOnly`` replaces the agent's).

    Args:
        ledger: the ledger to record in; default: the one opened with ``c4a.init()``.
        tools: per-tool options by the tool's name as the model sees it, as ``EffectOptions`` or
            a dict of its fields laid over ``default``, e.g. ``{"lookup": {"kind": "read"}}``.
        default: options for every tool not named in ``tools`` (default: a ``"write"`` effect).

    The run id is the run's ``conversation_id``; ``scope="call"`` tools add the model's
    ``tool_call_id``. Calls that are in doubt, still running elsewhere, failed or denied go back
    to the model as tool results that say so.
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
    ) -> None:
        if not isinstance(default, EffectOptions):
            raise ConfigurationError("OnceOnly(default=...) takes a c4a.EffectOptions(...)")
        self.ledger = ledger
        self.default = default
        self.tools: Mapping[str, EffectOptions] = MappingProxyType(
            {name: _tool_options(name, given, default) for name, given in tools.items()}
        )
        self._answered_by: dict[str, str] = {}  # per run: who answered each deferred call

    def __repr__(self) -> str:
        return f"OnceOnly(ledger={self.ledger!r}, tools={sorted(self.tools)!r})"

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
        run._answered_by = {}
        return run

    async def before_node_run(
        self, ctx: RunContext[Any], *, node: AgentNode[Any]
    ) -> AgentNode[Any]:
        """A continuation's answers: note who gave them, and record every "no" in the ledger."""
        if isinstance(node, UserPromptNode) and node.deferred_tool_results is not None:
            results = node.deferred_tool_results
            self._answered_by.update(results.answered_by)
            await _approvals.record_denials(
                ctx, results, lambda call: self._history_action(ctx, call)
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
        options = self.options(tool_def.name)
        if not options.recorded:
            return await handler(args)
        try:
            action = self._action(ctx, call, tool_def.name, args, options)
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
        attempt = 0

        async def execute() -> Any:
            nonlocal attempt
            attempt = c4a.current().attempt
            try:
                return await handler(args)
            except _outcomes.CONTROL_FLOW as exc:
                if _outcomes.timed_out(exc):
                    # A tool timeout may leave the tool running: record it as in doubt.
                    raise OutcomeUnknown(f"{action.tool} timed out and may still act") from exc
                raise

        try:
            return await arun_tool(action, execute)
        except _outcomes.CONTROL_FLOW:
            raise
        except c4a.ApprovalRequired as exc:
            raise _approvals.deferral(exc) from None
        except Call4AgentsError as exc:
            return _give_back(_outcomes.refused(exc))
        except Exception as exc:  # any error of the tool goes to the model as a result
            in_doubt = is_in_doubt_error(exc, action.options)
            raise _outcomes.tool_raised(action, exc, attempt=attempt, in_doubt=in_doubt) from exc


def _give_back(outcome: Any) -> Any:
    """Raise a ToolFailed (Pydantic AI's failed-result signal); return anything else."""
    if isinstance(outcome, BaseException):
        raise outcome
    return outcome


def _tool_options(
    tool: str, given: EffectOptions | Mapping[str, Any], default: EffectOptions
) -> EffectOptions:
    """Resolve one ``tools`` entry now, so a typo fails at construction, not mid-run."""
    if not isinstance(given, (EffectOptions, Mapping)):
        raise ConfigurationError(
            f"OnceOnly(tools={{{tool!r}: ...}}) takes c4a.EffectOptions(...) or a dict of its "
            f"fields, not {type(given).__name__}"
        )
    if isinstance(given, Mapping):
        unknown = sorted(set(given) - _OPTION_NAMES)
        if unknown:
            raise ConfigurationError(
                f"OnceOnly(tools={{{tool!r}: ...}}): unknown option(s) {', '.join(unknown)}; "
                f"known: {', '.join(sorted(_OPTION_NAMES))}"
            )
    return options_for(tool, {tool: given}, default)
