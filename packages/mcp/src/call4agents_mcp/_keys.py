"""The client side: a stable idempotency key per (run, tool, arguments), sent in ``_meta``.

The key is a hash, so it says nothing about the run or the arguments to whoever reads the wire,
and it is the same in every process that resumes the run: a client that lost a response and calls
again, or an agent restarted from its saved history, sends the same key and gets the first result.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Final, Protocol

from call4agents import ConfigurationError
from call4agents.integration import canonical_args, check_run_id, current_run

from ._endings import ending_in_error, ending_of

if TYPE_CHECKING:
    from mcp.types import CallToolResult

KEY_META: Final = "io.call4agents/idempotency-key"
"""The ``_meta`` field of a ``tools/call`` request that carries the client's idempotency key."""

EXTENSION: Final = "io.call4agents/once-only"
"""The extension identifier servers advertise under ``capabilities.extensions``."""

MAX_KEY_LENGTH: Final = 255

RunId = str | Callable[[Any], str] | None
"""A run id, a function of the framework's context returning one, or None for the current run."""


def idempotency_key(
    tool: str, arguments: Mapping[str, Any] | None = None, *, run_id: str | None = None
) -> str:
    """The key of one logical call: the same run, tool and arguments give the same key.

    ``run_id`` defaults to the enclosing ``with c4a.run(...)``. Arguments are canonicalised like
    the core does (so ``{"a": 1, "b": 2}`` and ``{"b": 2, "a": 1}`` agree) and a value with no
    stable form raises :class:`call4agents.UnstableArguments` before anything is sent.
    """
    run = _run_id(run_id, tool)
    material = canonical_args(tool, dict(arguments or {})).key_material
    # Length-prefixed parts: no run id or tool name can be made to collide with another's.
    text = "c4a-mcp/1|" + "|".join(f"{len(p)}:{p}" for p in (run, tool, material))
    return "c4a-" + hashlib.sha256(text.encode()).hexdigest()[:40]


def _run_id(run_id: str | None, tool: str) -> str:
    if run_id is not None:
        return check_run_id(run_id)
    run = current_run()
    if run is None:
        raise ConfigurationError(
            f"no run id for the MCP call to {tool}: pass run_id=, or call inside "
            '`with c4a.run("<id that survives a resume>"):`'
        )
    return run.run_id


class _Caller(Protocol):
    """``mcp.Client`` and ``mcp.ClientSession``: anything with the SDK's ``call_tool``."""

    def call_tool(
        self, name: str, arguments: dict[str, Any] | None = ..., *, meta: Any = ...
    ) -> Awaitable[CallToolResult]: ...


async def call_tool(
    client: Any,
    name: str,
    arguments: Mapping[str, Any] | None = None,
    *,
    run_id: str | None = None,
    key: str | None = None,
    meta: Mapping[str, Any] | None = None,
    raise_on_end: bool = True,
    **options: Any,
) -> CallToolResult:
    """``client.call_tool(name, arguments)`` with a stable idempotency key in ``_meta``.

    ``client`` is an ``mcp.Client`` or ``mcp.ClientSession``. The key comes from ``key=`` if given,
    else from (run, tool, arguments); retrying with the same run and arguments sends the same key,
    so a server with ``OnceOnly`` answers the retry with the first result. ``options`` go to
    ``call_tool`` unchanged (``read_timeout_seconds``, ``progress_callback``, ...).

    When the server answers that the run has ended (its budget is spent, or it was handed over
    to a person), this raises that ending: ``c4a.BudgetExceeded`` or ``c4a.Escalated`` (with
    the hand-off). ``raise_on_end=False`` returns the error result instead.
    """
    args = dict(arguments or {})
    sent = dict(meta or {})
    sent.setdefault(
        KEY_META, key if key is not None else idempotency_key(name, args, run_id=run_id)
    )
    caller: _Caller = client
    result = await caller.call_tool(name, args, meta=sent, **options)
    ending = ending_of(result) if raise_on_end else None
    if ending is not None:
        raise ending
    return result


def tool_meta_resolver(*, run_id: RunId = None) -> Callable[[Any], dict[str, Any]]:
    """A ``tool_meta_resolver`` for the Agents SDK's MCP servers that adds the key to ``_meta``.

    ``MCPServerStreamableHttp(params, tool_meta_resolver=tool_meta_resolver())``. ``run_id`` is a
    string, a function of the SDK's ``MCPToolMetaContext``, or None for the enclosing
    ``with c4a.run(...)`` around ``Runner.run``.
    """

    def resolve(context: Any) -> dict[str, Any]:
        run = run_id(context) if callable(run_id) else run_id
        return {KEY_META: idempotency_key(context.tool_name, context.arguments, run_id=run)}

    return resolve


def process_tool_call(*, run_id: RunId = None) -> Callable[..., Awaitable[Any]]:
    """A ``process_tool_call`` hook for Pydantic AI's ``MCPToolset`` that sends the key.

    ``MCPToolset(client, process_tool_call=process_tool_call())``. ``run_id`` is a string, a
    function of the ``RunContext``, or None: the enclosing ``with c4a.run(...)``, else the run's
    ``conversation_id`` (stable when the agent resumes with its message history).

    A server answer saying the run has ended ends the agent's run: ``c4a.BudgetExceeded`` or
    ``c4a.Escalated`` leaves ``agent.run(...)`` instead of going back to the model.
    """

    async def process(
        ctx: Any, call: Callable[..., Awaitable[Any]], name: str, tool_args: dict[str, Any]
    ) -> Any:
        run = run_id(ctx) if callable(run_id) else run_id
        if run is None and current_run() is None:
            run = getattr(ctx, "conversation_id", None)
        key = idempotency_key(name, tool_args, run_id=run)
        try:
            result = await call(name, tool_args, metadata={KEY_META: key})
        except Exception as exc:
            # MCPToolset raises ModelRetry for an error result; ours carries the ending.
            ending = ending_in_error(exc)
            if ending is not None:
                raise ending from None
            raise
        ending = ending_of(result)
        if ending is not None:
            raise ending
        return result

    return process


def client_key(meta: Mapping[str, Any] | None) -> object:
    """The raw key field of a request's ``_meta`` (None when absent); checked by the server."""
    return (meta or {}).get(KEY_META)
