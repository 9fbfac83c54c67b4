"""One function tool made once-only: its invoke path runs through the ledger.

The tool keeps everything the SDK runs around the invoke path (schema, guardrails, timeout,
hooks). Only two public fields change: ``on_invoke_tool`` (the ledger around the original
invoker) and, when a call may need a person's yes, ``needs_approval`` (see ``_approval``).

A ``@function_tool`` normally turns the tool's exception into an error text before anything
outside sees it, which would make a failure look like a result to the ledger. So the ledger runs
a private copy of the tool that lets the exception through, records the failure, and then applies
the tool's own failure policy, so the model sees exactly what it would see without Call4Agents.

Each call runs in its run's scope (``c4a.run``, see ``_controls``): the run's budget gates the
claim, and ``c4a.escalate()`` works inside the tool. A budget cut or an escalation is not a tool
error: it ends the SDK's run. An agent used as a tool is not recorded, but runs in the same scope,
so the nested run counts against its parent's budget and its endings end the parent's run.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Awaitable, Callable
from typing import Any

from agents import FunctionTool, ToolOriginType
from agents.tool import (
    get_function_tool_origin,
    maybe_invoke_function_tool_failure_error_function,
    set_function_tool_failure_error_function,
)
from agents.tool_context import ToolContext

from call4agents import (
    Call4AgentsError,
    ConfigurationError,
    EffectInDoubt,
    EffectOptions,
    LedgerError,
    UnstableArguments,
)
from call4agents.integration import (
    Action,
    arun_tool,
    ends_run,
    is_in_doubt_error,
    message_for_model,
)

from ._approval import policy
from ._owner import Owner
from ._run_id import resolve_run_id
from ._tracing import ActionSpan

Invoker = Callable[[ToolContext[Any], str], Awaitable[Any]]

# Set on every invoker OnceOnly builds, so wrapping an agent twice records each call once.
MARK = "__call4agents_once_only__"


def is_wrapped(tool: FunctionTool) -> bool:
    return bool(getattr(tool.on_invoke_tool, MARK, False))


def take_invoker(tool: FunctionTool, built: FunctionTool) -> None:
    """Give the user's own ``tool`` the invoke path (and approval policy) of ``built``, the
    once-only copy made from a snapshot of it: the agent keeps its own tool objects."""
    tool.on_invoke_tool = built.on_invoke_tool
    tool.needs_approval = built.needs_approval


def passes_through(tool: FunctionTool, configured: bool) -> bool:
    """Agents used as tools and MCP tools are left alone unless named in ``tools=``.

    An agent used as a tool pauses and resumes its own run for approvals, so a recorded result
    would cut that short; its function tools carry their own guarantee when it is wrapped too.
    """
    origin = get_function_tool_origin(tool)
    kind = origin.type if origin is not None else ToolOriginType.FUNCTION
    return kind != ToolOriginType.FUNCTION and not configured


def parse_arguments(args_json: str) -> dict[str, Any] | None:
    """The model's arguments as a dict, or None when they are not a JSON object."""
    try:
        found = json.loads(args_json) if args_json else {}
    except ValueError:
        return None
    return found if isinstance(found, dict) else None


def build(once: Owner, tool: FunctionTool, options: EffectOptions) -> FunctionTool:
    """The once-only copy of ``tool`` (whose options say it is recorded)."""
    raising = set_function_tool_failure_error_function(copy.copy(tool), None)
    wrapped = copy.copy(tool)
    invoke = _invoker(once, tool, raising.on_invoke_tool, options)
    setattr(invoke, MARK, True)
    wrapped.on_invoke_tool = invoke
    if once.may_need_approval(tool, options):
        wrapped.needs_approval = policy(once, tool, options)
    return wrapped


def is_agent_tool(tool: FunctionTool) -> bool:
    origin = get_function_tool_origin(tool)
    return origin is not None and origin.type == ToolOriginType.AGENT_AS_TOOL


def build_agent_tool(once: Owner, tool: FunctionTool) -> FunctionTool:
    """An agent used as a tool, not recorded, but inside the run's scope and budget.

    The nested agent's model requests and tool calls then count against this run's budget, and
    a budget cut or an escalation in the nested run ends this run too, instead of reaching the
    model as the agent-tool's error text (the SDK's default for an agent used as a tool).
    """
    raising = set_function_tool_failure_error_function(copy.copy(tool), None).on_invoke_tool
    wrapped = copy.copy(tool)

    async def on_invoke_tool(ctx: ToolContext[Any], args_json: str) -> Any:
        run_id = resolve_run_id(ctx, once.run_id_source)
        if run_id is None:  # no run, so no budget to count against: the SDK's own path
            return await tool.on_invoke_tool(ctx, args_json)
        with once.controls.scope(run_id).enter():
            try:
                return await raising(ctx, args_json)
            except Exception as exc:
                if ends_run(exc):
                    await once.controls.end_run(exc)
                text = await maybe_invoke_function_tool_failure_error_function(
                    function_tool=tool, context=ctx, error=exc
                )
                if text is None:
                    raise
                return text

    setattr(on_invoke_tool, MARK, True)
    wrapped.on_invoke_tool = on_invoke_tool
    return wrapped


def _invoker(once: Owner, tool: FunctionTool, raising: Invoker, options: EffectOptions) -> Invoker:
    async def on_invoke_tool(ctx: ToolContext[Any], args_json: str) -> Any:
        arguments = parse_arguments(args_json)
        if arguments is None:  # malformed arguments: the SDK reports them, the tool cannot run
            return await tool.on_invoke_tool(ctx, args_json)
        run_id = once.run_id_for(ctx, tool.name)
        # The whole call runs in the run's scope: its budget gates the claim, and an
        # approval policy or the tool itself can call c4a.escalate().
        scope = once.controls.scope(run_id, options.ledger)
        with scope.enter():
            try:
                action = once.keyed(options, tool.name, arguments, run_id, ctx.tool_call_id)
            except UnstableArguments as exc:
                return message_for_model(exc)
            except Exception as exc:
                if ends_run(exc):  # the approval policy escalated
                    await once.controls.end_run(exc, scope.ledger)
                raise
            await once.prepare_approval(action, tool, ctx)
            return await _run(once, tool, action, ctx, lambda: raising(ctx, args_json))

    return on_invoke_tool


async def _run(
    once: Owner,
    tool: FunctionTool,
    action: Action,
    ctx: ToolContext[Any],
    call: Callable[[], Awaitable[Any]],
) -> Any:
    span = ActionSpan(action)
    try:
        result = await arun_tool(action, span.call(call))
    except BaseException as exc:
        span.finish(exc=exc)
        if not isinstance(exc, Exception):  # cancelled: the SDK's to handle
            raise
        return await _settle(once, tool, action, ctx, exc)
    span.finish(result)
    return result


async def _settle(
    once: Owner, tool: FunctionTool, action: Action, ctx: ToolContext[Any], exc: Exception
) -> Any:
    """What the SDK gets for a call that did not return: an error text, or the run's end."""
    if isinstance(exc, (ConfigurationError, LedgerError)):
        raise exc  # a set-up or database fault: fail the run loudly, nothing is hidden
    if ends_run(exc):  # a budget cut or an escalation (escalate_on's too): the run ends here
        await once.controls.end_run(exc, action.ledger)
    if isinstance(exc, Call4AgentsError):
        return message_for_model(exc)
    return await _tool_failed(tool, action, ctx, exc)


async def _tool_failed(
    tool: FunctionTool, action: Action, ctx: ToolContext[Any], exc: Exception
) -> Any:
    if is_in_doubt_error(exc, action.options):
        doubt = EffectInDoubt(
            key=action.key,
            run_id=action.run_id,
            tool=action.tool,
            reason=f"it raised {type(exc).__name__}",
            attempt=0,
        )
        return message_for_model(doubt)
    if not _sdk_handles_errors(tool):
        raise exc
    text = await maybe_invoke_function_tool_failure_error_function(
        function_tool=tool, context=ctx, error=exc
    )
    if text is None:  # the tool was built with failure_error_function=None: the run fails
        raise exc
    return text


def _sdk_handles_errors(tool: FunctionTool) -> bool:
    # Invokers made by @function_tool and Agent.as_tool carry this binding hook (FunctionTool's
    # own __post_init__ looks for it); a hand-built FunctionTool's errors fail the run instead.
    return callable(getattr(tool.on_invoke_tool, "__agents_bind_function_tool__", None))
