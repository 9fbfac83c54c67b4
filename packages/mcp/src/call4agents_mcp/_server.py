"""``OnceOnly``: every ``tools/call`` of an MCP server goes through the Call4Agents ledger.

It plugs in as server middleware (``MCPServer(middleware=[OnceOnly()])``, the recommended way: it
also reads tool annotations and advertises itself) or as an extension
(``MCPServer(extensions=[OnceOnly()])``). Given to both, the middleware does the work once.

How one call is keyed:

- with a client key in ``_meta["io.call4agents/idempotency-key"]``: the key names the action, in
  the namespace of the authenticated client (``mcp:anonymous`` without auth). The same key with
  other arguments is refused, as Stripe refuses it.
- without one: the caller's identity (authenticated client, else transport session, else
  ``anonymous``), the tool and its canonical arguments, within ``window`` seconds.

Each call's tool runs inside its caller's run, ``mcp:<caller>``, with the server's budget. A
budget cut or an escalation answers with an ``isError`` result saying the run ended (see
``_endings``); it is never recorded as the tool's result.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import time
from collections.abc import Awaitable, Callable, Collection, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, replace
from typing import Any, Final, TypeVar

import anyio.to_thread
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import principal_components
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.extension import Extension
from mcp.server.streamable_http import MCP_SESSION_ID_HEADER
from mcp_types import CallToolRequestParams
from mcp_types.methods import is_input_required, serialize_server_result
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError

import call4agents as c4a
from call4agents import (
    Budget,
    BudgetExceeded,
    Call4AgentsError,
    ConfigurationError,
    EffectOptions,
    Escalated,
    Ledger,
    LedgerError,
    ResultNotStored,
)
from call4agents.integration import (
    Action,
    LedgerCore,
    OnceOnlySettings,
    Row,
    Trigger,
    action_for,
    arun_tool,
    ends_run,
    escalate_by_policy,
    handoff,
    is_in_doubt_error,
    options_for,
    recorded,
    recorded_with_other_args,
    register_tool_payload_shape,
    run_entered,
    run_part,
    uncovered_call,
    warn_once,
)

from . import _endings, _hooks
from . import _outcomes as out
from ._keys import EXTENSION, KEY_META, MAX_KEY_LENGTH, client_key
from ._payload import tool_payload

register_tool_payload_shape(tool_payload)  # spans and hand-offs see the tool's own value

logger = logging.getLogger("call4agents_mcp")
T = TypeVar("T")

Identity = Callable[[ServerRequestContext[Any, Any]], str | None]
ToolOptions = Mapping[str, EffectOptions | Mapping[str, Any]]

# Where each era's handshake advertises OnceOnly: SEP-2133's `extensions` exist from 2026-07-28
# (`server/discover`); the 2025 schema (`initialize`) has none, and names non-standard
# capabilities under `experimental`, so an `extensions` field there would be off its schema (the
# SDK drops its own extensions on that wire for the same reason).
_ADVERTISED_UNDER: Final = {"server/discover": "extensions", "initialize": "experimental"}
_HINTS_TTL: Final = 60.0  # seconds a tools/list answer seeds options before it is asked again
_HINTS_RETRY: Final = 1.0  # at most this often for a tool the last listing did not show
_MAX_LIST_PAGES: Final = 100
_ENTERED_KEPT: Final = 10_000  # run ids remembered as entered, per OnceOnly

# Set while OnceOnly handles a tools/call, so the same object given as middleware and as an
# extension acts once: a nested claim of the same action would wait on its own lease.
_active: ContextVar[bool] = ContextVar("c4a_mcp_active", default=False)


@dataclass(frozen=True)
class _Call:
    tool: str
    arguments: dict[str, Any]
    key: object  # the raw _meta field: None when absent, checked before use


def authenticated_client(ctx: ServerRequestContext[Any, Any]) -> str | None:
    """The default identity: the OAuth principal (issuer, client, subject), None without auth."""
    token = get_access_token()
    if token is None:
        return None
    client_id, issuer, subject = principal_components(token)
    return "client:" + json.dumps([issuer, client_id, subject], separators=(",", ":"))


def _session(ctx: ServerRequestContext[Any, Any]) -> str | None:
    headers = getattr(ctx.request, "headers", None)
    value = headers.get(MCP_SESSION_ID_HEADER) if headers is not None else None
    return f"session:{value}" if value else None


class OnceOnly(Extension):
    """Make every ``tools/call`` of an MCP server happen at most once per logical call.

    Args:
        ledger: the ledger to use; default the one opened with ``c4a.init()``.
        tools: per-tool options by MCP tool name, as ``EffectOptions`` or a dict of its fields
            laid over ``default``. ``{"search": {"kind": "read"}}`` skips the ledger.
        default: options for every other tool.
        window: without a client key, an identical call from the same caller within this many
            seconds is answered from the ledger (one up to twice as old may be); None keeps it for
            as long as the ledger keeps the action.
        identity: ``f(ctx) -> str | None`` naming the caller (a tenant, an API key's owner).
            Default: the authenticated OAuth principal. Client keys live in its namespace.
        annotations: seed each tool's defaults from its annotations (middleware only):
            ``readOnlyHint`` skips the ledger, ``destructiveHint`` makes it ``irreversible``,
            ``idempotentHint`` may re-run an in-doubt call.
            They are hints the server's own tools declare; explicit ``tools=`` options win.
        cancel_grace: seconds a call keeps running after the client cancels it (a client
            timeout does), so its result is recorded and the client's retry gets it. None stops
            it at once, which leaves it in doubt: cancelled half way, it may have acted.
        anonymous_window: apply the keyless window to callers with no identity at all (no
            auth, no session id). Off by default: such callers cannot be told apart, so two
            clients sending the same request would get one execution between them.
        budget: limits on each run's tool executions (``max_tool_calls``,
            ``max_calls_per_tool``, ``deadline``), counted in the ledger per run id
            (``mcp:<caller>``), so a restart or another replica on the same ledger continues
            the count. A server sees no model requests: those limits are the client's to apply.
        escalate_on: outcomes that end the run as escalated to a person (``c4a.Escalated``)
            instead of an error result the model may work around: ``"in_doubt"``,
            ``"denied"``, ``"budget"``.
        trigger: what starts the runs this server serves: ``"user"``, ``"schedule"``,
            ``"webhook"``. A server never sees a run end, so it is recorded in the ledger as
            this process first enters each run (its first tool call there), or ``"retry"`` when
            the run had recorded actions before (a restart, another replica).
    """

    identifier = EXTENSION

    def __init__(
        self,
        *,
        ledger: Ledger | None = None,
        tools: ToolOptions | None = None,
        default: EffectOptions | None = None,
        window: float | None = 600.0,
        identity: Identity | None = None,
        annotations: bool = True,
        cancel_grace: float | None = 60.0,
        anonymous_window: bool = False,
        budget: Budget | None = None,
        escalate_on: Collection[str] = (),
        trigger: Trigger | None = None,
    ) -> None:
        if window is not None and not window > 0:
            raise ConfigurationError("window must be a positive number of seconds, or None")
        self._shared = OnceOnlySettings.check(
            ledger=ledger,
            tools=tools,
            default=default,
            budget=budget,
            escalate_on=escalate_on,
            trigger=trigger,
        )
        _refuse_credentials(self._shared.default, self._shared.tools)
        # Hooks (undo, find_existing, check) adapted once, here, so the undo registered under
        # each tool's name is the one that is handed the tool's value. Adapted from the entries
        # as given: a dict's finder makes its own check instead of inheriting the default's.
        self._tools = {name: _adapted(given) for name, given in (tools or {}).items()}
        self._default = _hooks.for_tool_calls(self._shared.default)
        for name in self._tools:
            options_for(name, self._tools, self._default)  # registers the adapted undo=
        self._entered: dict[str, None] = {}  # runs this process entered, oldest first
        self._window = window
        self._identity = identity or authenticated_client
        self._use_annotations = annotations
        self._grace = cancel_grace
        self._anonymous_window = anonymous_window
        self._hints: dict[str, Mapping[str, Any]] = {}
        self._hints_at = -_HINTS_TTL
        self._listing_failed = False
        out.install_witness()

    def settings(self) -> dict[str, Any]:
        """Advertised under ``capabilities.extensions["io.call4agents/once-only"]`` (2026-07-28),
        or ``capabilities.experimental[...]`` on the handshake era, whose schema has no
        ``extensions``."""
        return {"metaKey": KEY_META, "windowSeconds": self._window}

    # -- the two ways in ------------------------------------------------------------------------

    async def __call__(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        """Server middleware: ``MCPServer(middleware=[OnceOnly()])``."""
        if ctx.method == "tools/call" and ctx.request_id is not None and not _active.get():
            call = _parse(ctx.params)
            if call is not None:
                token = _active.set(True)
                try:
                    return await self._tools_call(call, ctx, call_next, _Wire(ctx.protocol_version))
                finally:
                    _active.reset(token)
        result = await call_next(ctx)
        field = _ADVERTISED_UNDER.get(ctx.method)
        if field is not None and isinstance(result, dict):
            _advertise(result, field, self.settings())
        return result

    async def intercept_tool_call(
        self,
        params: CallToolRequestParams,
        ctx: ServerRequestContext[Any, Any],
        call_next: CallNext,
    ) -> HandlerResult:
        """Extension: ``MCPServer(extensions=[OnceOnly()])``."""
        if _active.get():
            return await call_next(ctx)
        call = _Call(params.name, dict(params.arguments or {}), client_key(params.meta))
        token = _active.set(True)
        try:
            return await self._tools_call(call, ctx, call_next, _Handler())
        finally:
            _active.reset(token)

    # -- one call -------------------------------------------------------------------------------

    async def _tools_call(
        self, call: _Call, ctx: ServerRequestContext[Any, Any], call_next: CallNext, tier: _Tier
    ) -> HandlerResult:
        if not await self._listed(call.tool, ctx, call_next, tier):
            return await self._unlisted(call, ctx, call_next)
        options = await self._options(call.tool, ctx, call_next, tier)
        caller = self._identity(ctx)  # here, not in the worker thread: it may read contextvars
        if call.key is None:
            caller = caller or _session(ctx)
        if not options.recorded:
            return await self._plain(call, ctx, call_next, tier, caller)
        try:
            action = await anyio.to_thread.run_sync(self._action, call, caller, options)
        except Escalated as exc:  # this very call handed the run over before: not run again
            return tier.finish(_endings.answer(exc, call.tool, None))
        except Call4AgentsError as exc:
            return tier.finish(out.refusal(exc, call.tool))
        if action is None:
            return await self._plain(call, ctx, call_next, tier, caller)
        # The span's gen_ai.tool.call.id and c4a.current().call_id: MCP's id of this request.
        # Set after keying, so it never enters the key (a retry has a new request id). Not a
        # stable call id: every connection numbers its requests from the start, so two clients'
        # first calls share one; an approval ticket must not take one for an edit of the other.
        action = replace(action, call_id=_request_id(ctx), call_id_stable=False)
        return await self._once(action, call, ctx, call_next, tier)

    async def _unlisted(
        self, call: _Call, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        """A tool the client's ``tools/list`` does not show: the server's own answer (MCPServer's
        "Unknown tool" error) goes back as it is, and nothing is recorded. A low-level server
        whose handler serves an unlisted name anyway has run it outside the ledger: say so."""
        result = await call_next(ctx)
        if out.as_dict(result).get("isError") is not True:
            warn_once(
                f"mcp-unlisted:{call.tool}",
                f"{call.tool} is not in this server's tools/list, yet its tools/call handler ran "
                "it, so it ran without the ledger. List every tool the server serves.",
            )
        return result

    async def _plain(
        self,
        call: _Call,
        ctx: ServerRequestContext[Any, Any],
        call_next: CallNext,
        tier: _Tier,
        caller: str | None,
    ) -> HandlerResult:
        """A call run without the ledger (a read, or nothing to key it by), still in its run:
        ``c4a.escalate()`` and ``@c4a.effect`` calls inside find the run and its budget, and
        ``c4a.current()`` says the call is not covered (``covered=False``)."""
        run_id = _run_id(caller or "anonymous")
        await self._enter(run_id, self._shared.ledger)
        seen, token = out.watch()
        try:
            with (
                self._run(run_id, self._shared.ledger),
                uncovered_call(run_id, call.tool, _request_id(ctx)),
            ):
                result = await call_next(ctx)
        except Exception as exc:
            if ends_run(exc):  # raised by a low-level server's handler
                return tier.finish(await self._ending(exc, call.tool, None))
            raise
        finally:
            out.stop_watching(token)
        ending = _ending_seen(seen)
        if ending is not None and out.as_dict(result).get("isError") is True:
            return tier.finish(await self._ending(ending, call.tool, None))
        return result

    async def _enter(self, run_id: str, ledger: LedgerCore | None) -> None:
        """Record the trigger as this process first enters run ``run_id`` (once per run)."""
        if self._shared.trigger is None or run_id in self._entered:
            return
        if len(self._entered) >= _ENTERED_KEPT:  # a long-lived server's memory stays bounded
            self._entered.pop(next(iter(self._entered)))
        self._entered[run_id] = None  # before the write: a concurrent call does not repeat it
        enter = functools.partial(run_entered, run_id, ledger=ledger, trigger=self._shared.trigger)
        await anyio.to_thread.run_sync(enter)

    def _run(self, run_id: str, ledger: LedgerCore | None) -> c4a.run:
        """The run a call belongs to, with this server's budget (checked as the call claims)."""
        return run_part(run_id, ledger=ledger, budget=self._shared.budget)

    async def _once(
        self,
        action: Action,
        call: _Call,
        ctx: ServerRequestContext[Any, Any],
        call_next: CallNext,
        tier: _Tier,
    ) -> HandlerResult:
        fresh: list[HandlerResult] = []  # what this request's own run of the tool returned
        raised: list[Exception] = []  # what it failed with, read from its error result

        async def run() -> dict[str, Any]:
            seen, token = out.watch()
            try:
                result = await call_next(ctx)
            finally:
                out.stop_watching(token)
            fresh.append(result)
            answer = out.as_dict(result)
            if is_input_required(answer):
                raise out.NotTheAnswer("input required: this round asks the client")
            failure = _failure(answer, seen, action.options)
            if failure is not None:
                raised.append(failure)
                raise failure  # recorded as failed or in doubt, by its type
            return answer

        async def work() -> Any:
            with self._run(action.run_id, action.ledger):
                return await arun_tool(action, run)

        await self._enter(action.run_id, action.ledger)
        found = _hooks.found_now.set([])  # filled by a find_existing= hook that finds it
        try:
            stored = await _outlive_cancel(work, self._grace)
        except out.NotTheAnswer:
            return fresh[0]  # an input_required round: passed on, never kept as the answer
        except Exception as exc:  # noqa: BLE001 - each outcome is answered below, others raised
            failed = raised[0] if raised and exc is raised[0] else None
            return await self._not_a_result(exc, failed, action, call, fresh, tier)
        finally:
            hits = _hooks.found_now.get()
            _hooks.found_now.reset(found)
        if fresh:
            return fresh[0]
        if call.key is not None and await anyio.to_thread.run_sync(_other_args, action):
            # Lost a race with the same key and other arguments: that result is not ours.
            return tier.finish(out.refusal(out.KeyReused(call.tool), call.tool, action))
        if hits:
            return tier.finish(out.found_existing(stored, action))
        return tier.finish(out.replayed(stored, action))

    async def _not_a_result(
        self,
        exc: Exception,
        failed: Exception | None,
        action: Action,
        call: _Call,
        fresh: list[HandlerResult],
        tier: _Tier,
    ) -> HandlerResult:
        """The answer when the ledger or the tool did not produce a result to pass on.

        ``failed`` is ``exc`` when it is the tool's own failure in this request.
        """
        if ends_run(exc):
            return tier.finish(await self._ending(exc, call.tool, action))
        if failed is not None:
            if not is_in_doubt_error(failed, action.options):
                return tier.finish(out.mark_failed(out.as_dict(fresh[0]), action))
            if escalated := await self._escalated(failed, action):
                return tier.finish(_endings.answer(escalated, call.tool, action))
            return tier.finish(out.first_in_doubt(action, failed))
        if isinstance(exc, (ResultNotStored, LedgerError)) and fresh:
            # The tool ran and its answer is in hand; only recording it failed. Say what happened.
            return fresh[0]
        if not isinstance(exc, Call4AgentsError):
            raise exc  # a low-level server's handler raised: the SDK reports it, as without us
        if escalated := await self._escalated(exc, action):
            return tier.finish(_endings.answer(escalated, call.tool, action))
        return tier.finish(out.refusal(exc, call.tool, action))

    # -- endings --------------------------------------------------------------------------------

    async def _ending(self, exc: BaseException, tool: str, action: Action | None) -> dict[str, Any]:
        """The answer to a budget cut or an escalation: the run ended, never a tool result."""
        assert isinstance(exc, (BudgetExceeded, Escalated))
        return _endings.answer(await self._escalated(exc, action) or exc, tool, action)

    async def _escalated(self, exc: BaseException, action: Action | None) -> Escalated | None:
        """The escalation ``escalate_on`` makes of ``exc`` (a refusal, an in-doubt failure, a
        budget cut), recorded by the core's policy; None when the policy does not cover it."""
        if not self._shared.escalate_on:
            return None
        escalate = functools.partial(
            escalate_by_policy,
            exc,
            self._shared.escalate_on,
            action=action,
            ledger=self._shared.ledger,
        )
        try:
            await anyio.to_thread.run_sync(escalate)
        except Escalated as escalated:
            return escalated
        return None

    # -- keys -----------------------------------------------------------------------------------

    def _action(self, call: _Call, caller: str | None, options: EffectOptions) -> Action | None:
        """Key the call (runs in a worker thread: it may read the ledger)."""
        run_id = _run_id(caller or "anonymous")
        if call.key is not None:
            key = _checked_key(call.key, call.tool)
            keyed = replace(options, key=lambda **_: key, scope="args")
            action = action_for(
                call.tool, call.arguments, keyed, run_id=run_id, ledger=self._shared.ledger
            )
            row = recorded(action)
            if recorded_with_other_args(action, row):
                raise out.KeyReused(call.tool)
            _refuse_after_escalation(action, row)
            return action
        if options.scope == "call":
            warn_once(
                f"mcp-scope-call:{call.tool}",
                f"{call.tool} is scope='call' (a repeat may be deliberate) and the client sent no "
                f"idempotency key in _meta[{KEY_META!r}], so it runs without the ledger.",
            )
            return None
        if caller is None and not self._anonymous_window:
            # No key and nobody to tell callers apart: two clients sending the same email would
            # become one. Run it as it is, and say how to get once-only.
            warn_once(
                f"mcp-anonymous:{call.tool}",
                f"{call.tool} was called with no idempotency key in _meta[{KEY_META!r}] by a "
                "caller with no identity (no auth, no session id), so it runs without the ledger."
                " Send a key from the client (call4agents_mcp.call_tool), authenticate clients, or"
                " pass OnceOnly(anonymous_window=True) if one client is all this server has.",
            )
            return None
        action = self._windowed(call, options, run_id)
        _refuse_after_escalation(action, recorded(action))
        return action

    def _windowed(self, call: _Call, options: EffectOptions, run_id: str) -> Action:
        def at(call_id: str | None) -> Action:
            scoped = replace(options, scope="call") if call_id else options
            return action_for(
                call.tool,
                call.arguments,
                scoped,
                run_id=run_id,
                call_id=call_id,
                ledger=self._shared.ledger,
            )

        if self._window is None:
            return at(None)
        # Fixed windows, and a call also joins the action of the window before: a repeat within
        # `window` seconds is always found, wherever the boundary falls.
        bucket = int(time.time() // self._window)
        earlier = at(f"window/{self._window:g}/{bucket - 1}")
        if recorded(earlier) is not None:
            return earlier
        return at(f"window/{self._window:g}/{bucket}")

    # -- per-tool options -----------------------------------------------------------------------

    async def _options(
        self, tool: str, ctx: ServerRequestContext[Any, Any], call_next: CallNext, tier: _Tier
    ) -> EffectOptions:
        base = self._default
        explicit = isinstance(self._tools.get(tool), EffectOptions)
        if self._use_annotations and tier.can_list_tools and not explicit:
            base = _seeded(base, await self._hints_for(tool, ctx, call_next))
        return options_for(tool, self._tools, base)

    async def _hints_for(
        self, tool: str, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> Mapping[str, Any]:
        age = time.monotonic() - self._hints_at
        # A tool missing from the last listing may have been added since: ask again, but not
        # on every call of a tool the listing never shows.
        if age > _HINTS_TTL or (tool not in self._hints and age > _HINTS_RETRY):
            await self._list(ctx, call_next)
        return self._hints.get(tool) or {}

    async def _listed(
        self, tool: str, ctx: ServerRequestContext[Any, Any], call_next: CallNext, tier: _Tier
    ) -> bool:
        """Whether this client's tools/list shows ``tool`` (asked again when the last listing
        did not); True when it cannot be told (an extension, a listing that failed), so that a
        tool that exists is never run without the ledger."""
        if not tier.can_list_tools or tool in self._hints:
            return True
        return not await self._list(ctx, call_next) or tool in self._hints

    async def _list(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> bool:
        """Read the tools and their annotations as this client sees them; False if it failed."""
        self._hints_at = time.monotonic()
        try:
            self._hints = await _list_annotations(ctx, call_next)
        except Exception as exc:  # noqa: BLE001 - a listing failure must not block the call
            if not self._listing_failed:
                logger.warning("cannot list tools to read their annotations: %s", exc)
            self._listing_failed = True
            return False
        return True


# -- helpers ------------------------------------------------------------------------------------


def _failure(
    answer: dict[str, Any], seen: list[BaseException], options: EffectOptions
) -> Exception | None:
    """What an error result means, as the exception the engine records; None for a result.

    The tool's own exception when the SDK logged it (a run ending first, then one that leaves
    the call in doubt), else ``ToolErrorResult``: an error result says the tool did not act.
    """
    if answer.get("isError") is not True:
        return None
    causes = [c for c in map(out.original, seen) if isinstance(c, Exception)]
    for means in (ends_run, lambda c: is_in_doubt_error(c, options)):
        found = next((c for c in causes if means(c)), None)
        if found is not None:
            return found
    return causes[0] if causes else out.ToolErrorResult(answer)


def _ending_seen(seen: list[BaseException]) -> BaseException | None:
    """A budget cut or escalation the tool raised, which the SDK turned into an error result."""
    return next((c for c in map(out.original, seen) if ends_run(c)), None)


def _refuse_after_escalation(action: Action, row: Row | None) -> None:
    """Raise the run's ``Escalated`` again if this very call escalated it (runs in a thread).

    The escalating call is recorded as failed, which would let a retry run it again; the run
    was handed over instead, so the retry gets the hand-off, and the tool does not run.
    """
    if row is None or row.state != "failed" or not (row.error or "").startswith("Escalated:"):
        return
    found = handoff(action.ledger, action.run_id)
    if found is not None:
        raise Escalated(found)


def _request_id(ctx: ServerRequestContext[Any, Any]) -> str | None:
    return None if ctx.request_id is None else str(ctx.request_id)


def _adapted(given: EffectOptions | Mapping[str, Any]) -> EffectOptions | Mapping[str, Any]:
    if isinstance(given, EffectOptions):
        return _hooks.for_tool_calls(given)
    return _hooks.fields_for_tool_calls(given) if _hooks.has_hooks(given) else dict(given)


async def _outlive_cancel(work: Callable[[], Awaitable[T]], grace: float | None) -> T:
    """Run ``work``; if this request is cancelled meanwhile, let it finish within ``grace`` s.

    A client that times out cancels the request and then retries it. Stopping the tool half way
    would leave the action in doubt and the retry refused; finishing it records the result that
    the retry (waiting on the live lease) then gets.
    """
    if grace is None:
        return await work()
    outcome: list[T] = []
    failure: list[BaseException] = []
    done = anyio.Event()
    shield = anyio.CancelScope(shield=True)

    async def worker() -> None:
        with shield:
            try:
                outcome.append(await work())
            except BaseException as exc:  # noqa: BLE001 - handed back to the request below
                failure.append(exc)
            finally:
                done.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(worker)
        try:
            await done.wait()
        except anyio.get_cancelled_exc_class():
            shield.deadline = anyio.current_time() + grace  # then it is stopped: in doubt
            raise
    if failure:
        raise failure[0]
    return outcome[0]


def _refuse_credentials(default: EffectOptions, tools: Mapping[str, EffectOptions]) -> None:
    for name, options in {"default": default, **tools}.items():
        if options.credentials:
            raise ConfigurationError(
                f"{name}: credentials= cannot be injected into MCP tools (the SDK calls them with "
                "the client's arguments); read the secret inside the tool instead"
            )


def _parse(params: Mapping[str, Any] | None) -> _Call | None:
    """A tools/call's raw params, or None if malformed (the SDK then reports the error)."""
    if not isinstance(params, Mapping):
        return None
    name, arguments, meta = params.get("name"), params.get("arguments") or {}, params.get("_meta")
    if not isinstance(name, str) or not isinstance(arguments, Mapping):
        return None
    return _Call(name, dict(arguments), client_key(meta if isinstance(meta, Mapping) else None))


def _checked_key(key: object, tool: str) -> str:
    if not isinstance(key, str) or not key.strip() or len(key) > MAX_KEY_LENGTH:
        raise ConfigurationError(
            f"the idempotency key for {tool} in _meta[{KEY_META!r}] must be a non-empty string of "
            f"at most {MAX_KEY_LENGTH} characters; nothing was run"
        )
    return key


def _run_id(namespace: str) -> str:
    run_id = "mcp:" + namespace
    if len(run_id) > 200:  # an identity may be long (a JWT subject): keep run ids printable
        run_id = "mcp:" + hashlib.sha256(namespace.encode()).hexdigest()
    return run_id


def _other_args(action: Action) -> bool:
    """True if the action's key is already recorded with other arguments (a reused client key)."""
    return recorded_with_other_args(action, recorded(action))


def _seeded(options: EffectOptions, hints: Mapping[str, Any]) -> EffectOptions:
    """Defaults from a tool's annotations (hints only: explicit options are laid over these)."""
    if hints.get("readOnlyHint") is True:
        return replace(options, kind="read")
    changes: dict[str, Any] = {}
    if hints.get("destructiveHint") is True and options.kind == "write":
        changes["kind"] = "irreversible"  # so a ledger's approval_for=("irreversible",) applies
    if hints.get("idempotentHint") is True:
        changes["retry_in_doubt"] = True
    return replace(options, **changes) if changes else options


async def _list_annotations(
    ctx: ServerRequestContext[Any, Any], call_next: CallNext
) -> dict[str, Mapping[str, Any]]:
    """Ask the rest of the chain for tools/list, as this client would see it."""
    params = ctx.params or {}
    raw_meta = params.get("_meta")
    # The modern envelope (protocol version, client info) must ride along; nothing else should.
    meta = {
        k: v
        for k, v in (raw_meta.items() if isinstance(raw_meta, Mapping) else ())
        if k.startswith("io.modelcontextprotocol/")
    }
    found: dict[str, Mapping[str, Any]] = {}
    cursor: str | None = None
    for _ in range(_MAX_LIST_PAGES):
        list_params: dict[str, Any] = {"_meta": meta} if meta else {}
        if cursor:
            list_params["cursor"] = cursor
        listing = out.as_dict(
            await call_next(replace(ctx, method="tools/list", params=list_params or None))
        )
        for tool in listing.get("tools") or ():
            if isinstance(tool, Mapping) and isinstance(tool.get("name"), str):
                found[tool["name"]] = tool.get("annotations") or {}
        cursor = listing.get("nextCursor")
        if not cursor:
            break
    return found


def _advertise(result: dict[str, Any], field: str, settings: dict[str, Any]) -> None:
    capabilities = result.get("capabilities")
    if isinstance(capabilities, dict):
        advertised = capabilities.setdefault(field, {})
        if isinstance(advertised, dict):
            advertised.setdefault(EXTENSION, settings)


# -- the two tiers differ only in the shape they must answer with -------------------------------


class _Tier:
    can_list_tools = False

    def finish(self, answer: dict[str, Any]) -> HandlerResult:
        return answer


class _Handler(_Tier):
    """Extension tier: results are serialised for the wire by the SDK after us."""


class _Wire(_Tier):
    """Middleware tier: results are already wire dicts, so ours must be shaped for the version."""

    can_list_tools = True

    def __init__(self, version: str) -> None:
        self.version = version

    def finish(self, answer: dict[str, Any]) -> HandlerResult:
        try:
            shaped = serialize_server_result("tools/call", self.version, answer)
        except (KeyError, ValueError, ValidationError):
            shaped = dict(answer)
        if self.version in MODERN_PROTOCOL_VERSIONS:
            shaped.setdefault("resultType", "complete")
        return shaped
