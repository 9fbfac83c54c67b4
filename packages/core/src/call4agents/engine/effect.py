"""Once-only execution: the engine every effect and every integration runs tools through.

One call goes: canonical arguments -> action key -> finished result in this process? return it ->
claim the action in the ledger (intent durable, lease held) -> run the tool -> record the outcome.
An action met in another state is returned (succeeded), waited for (live lease), or settled by the
rules for doubt: a ``check=`` reconciler, ``retry_in_doubt=True``, or else ``EffectInDoubt``.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import operator
import os
import sys
import types
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, Generic, Literal, ParamSpec, TypeVar, cast, overload

from call4agents.engine import observe
from call4agents.engine.endings import escalate_by_policy
from call4agents.model.errors import (
    ConfigurationError,
    EffectInDoubt,
    LedgerError,
)
from call4agents.storage.store import Row

from . import _owner, owner_wait
from .action import Action, EffectOptions, Kind, prepare
from .approvals import ApprovalRequest
from .context import _effect, _run
from .ledger_core import LedgerCore
from .lookup import afinder_first, finder_first
from .run_notes import note_tool
from .steps import (
    AGAIN,
    MISS,
    Doubt,
    Go,
    Recalled,
    apply_verdict,
    begin,
    cached,
    in_doubt_error,
    owning,
    record_error,
    record_result,
    settle_found,
)
from .undos import register_undo

P = ParamSpec("P")
T = TypeVar("T")


# -- drivers ------------------------------------------------------------------------------------


def perform(action: Action, call: Callable[[], T]) -> T:
    """Run ``call`` once for ``action`` (sync tools)."""
    hook = observe.hook  # telemetry or replay; None (one global read) when neither is on
    try:
        if hook is not None:
            return hook.perform(action, call, _perform)
        return _perform(action, call)
    except Exception as exc:
        escalate_by_policy(exc, action.options.escalate_on, action=action)
        raise


def _perform(action: Action, call: Callable[[], T]) -> T:
    hit = cached(action)  # a finished action is final: no finder, no claim
    if hit is not MISS:
        return cast(T, hit)
    if action.options.find_existing is not None:
        call = finder_first(action, call)
    while True:
        step = begin(action)
        if isinstance(step, Recalled):
            return cast(T, step.value)
        if isinstance(step, Go):
            return _execute(action, step, call)
        outcome = settle_found(action, step.row)
        if isinstance(outcome, Doubt):
            outcome = _on_doubt(action, outcome.row)
            if isinstance(outcome, Go):
                return _execute(action, outcome, call)
        if outcome is not AGAIN:
            return cast(T, outcome)


def _on_doubt(action: Action, row: Row) -> Any:
    if action.options.check is not None:
        _same_args_or_raise(action, row)
        token = _effect.set(action.context(row.attempt))
        try:
            verdict = action.options.check(**action.arguments)
        finally:
            _effect.reset(token)
        settled = apply_verdict(action, row, verdict)
        if settled is not None:
            return settled
    return owning(None, _take_over, action, row)


def _take_over(action: Action, row: Row, owner: str) -> Any:
    if not action.options.retry_in_doubt:
        raise in_doubt_error(action, row)
    try:
        attempt = action.ledger.store.take_over(
            action.key,
            row.attempt,
            owner,
            action.ttl,
            args=action.args_display,
            args_digest=action.args_digest,
        )
    except LedgerError:
        _owner.unanswered(action.key, owner)  # as a lost claim: a retry knows it as its own
        raise
    if attempt is False:
        raise _other_args_in_doubt(action, row)
    return Go(attempt, owner) if attempt is not None else AGAIN


def _same_args_or_raise(action: Action, row: Row) -> None:
    """Before a reconciler judges the attempt in doubt by this call's arguments: they must be
    the arguments it was sent with (a ``key=`` may name one action for calls with others)."""
    stored = action.ledger.store.stored_args(action.key)
    if stored is not None and stored.digest not in (None, action.args_digest):
        raise _other_args_in_doubt(action, row)


def _other_args_in_doubt(action: Action, row: Row) -> EffectInDoubt:
    return EffectInDoubt(
        key=action.key,
        run_id=action.run_id,
        tool=action.tool,
        reason="the attempt in doubt had other arguments under this key; these are not sent"
        " in its place",
        attempt=row.attempt,
    )


def _execute(action: Action, go: Go, call: Callable[[], T]) -> T:
    heartbeat, attempt = action.ledger.heartbeat, go.attempt
    heartbeat.hold(action.key, attempt, action.ttl, go.owner)
    token = _effect.set(action.context(attempt))
    try:
        try:
            result = call()
        except BaseException as exc:
            _effect.reset(token)
            try:
                record_error(action, attempt, exc)
            except LedgerError as lost:
                if isinstance(exc, Exception):  # never swallow a KeyboardInterrupt or exit
                    raise _unrecorded(action, attempt, lost) from exc
            raise
        _effect.reset(token)
        try:
            return cast(T, record_result(action, attempt, result))
        except LedgerError as lost:
            raise _unrecorded(action, attempt, lost) from lost
    finally:
        # Held until the outcome is written (retried while the database is away), so that
        # others keep waiting for it rather than judge the action in doubt.
        heartbeat.release(action.key)
        _owner.finished(go.owner)


def _unrecorded(action: Action, attempt: int, lost: LedgerError) -> EffectInDoubt:
    """The tool ran but its outcome could not be written: the action will be in doubt."""
    return EffectInDoubt(
        key=action.key,
        run_id=action.run_id,
        tool=action.tool,
        reason=f"it ran, but its outcome could not be written to the ledger: {lost}",
        attempt=attempt,
    )


async def aperform(action: Action, call: Callable[[], Awaitable[T]]) -> T:
    """Run ``call`` once for ``action`` (async tools). Ledger I/O runs off the event loop."""
    hook = observe.hook
    try:
        if hook is not None:
            return await hook.aperform(action, call, _aperform)
        return await _aperform(action, call)
    except Exception as exc:
        if action.options.escalate_on:
            await asyncio.to_thread(
                escalate_by_policy, exc, action.options.escalate_on, action=action
            )
        raise


async def _aperform(action: Action, call: Callable[[], Awaitable[T]]) -> T:
    hit = cached(action)  # a finished action is final: no finder, no claim
    if hit is not MISS:
        return cast(T, hit)
    if action.options.find_existing is not None:
        call = afinder_first(action, call)
    while True:
        step = await _in_thread(lambda owner: begin(action, wait=False, owner=owner))
        if isinstance(step, Recalled):
            return cast(T, step.value)
        if isinstance(step, Go):
            return await _aexecute(action, step, call)
        row = await owner_wait.await_while_live(action, step.row)
        outcome = settle_found(action, row)
        if isinstance(outcome, Doubt):
            outcome = await _aon_doubt(action, outcome.row)
            if isinstance(outcome, Go):
                return await _aexecute(action, outcome, call)
        if outcome is not AGAIN:
            return cast(T, outcome)


async def _aon_doubt(action: Action, row: Row) -> Any:
    if action.options.check is not None:
        await asyncio.to_thread(_same_args_or_raise, action, row)
        token = _effect.set(action.context(row.attempt))
        try:
            verdict = action.options.check(**action.arguments)
            if inspect.isawaitable(verdict):
                verdict = await verdict
        finally:
            _effect.reset(token)
        settled = await asyncio.to_thread(apply_verdict, action, row, verdict)
        if settled is not None:
            return settled
    return await _in_thread(lambda owner: owning(owner, _take_over, action, row))


async def _in_thread(claim: Callable[[str], T]) -> T:
    """``claim(owner)`` in a thread, under an owner text made here: if this task is cancelled
    while the thread claims, no tool will run under it, and its process knows at once (an
    intent that still lands is then in doubt, not held by a lease nobody renews)."""
    owner = _owner.claim_owner()
    try:
        return await asyncio.to_thread(claim, owner)
    except asyncio.CancelledError:
        _owner.finished(owner)
        raise


async def _aexecute(action: Action, go: Go, call: Callable[[], Awaitable[T]]) -> T:
    attempt = go.attempt
    action.ledger.heartbeat.hold(action.key, attempt, action.ttl, go.owner)
    token = _effect.set(action.context(attempt))
    # The outcome's write, shielded: a task cancelled again while it runs (anyio cancels a
    # scope's task at each await) leaves it running, and must leave a durable outcome.
    writing: asyncio.Future[Any] | None = None
    try:
        try:
            result = await call()
        except BaseException as exc:
            _effect.reset(token)
            writing = asyncio.ensure_future(asyncio.to_thread(record_error, action, attempt, exc))
            try:
                await asyncio.shield(writing)
            except LedgerError as lost:
                if isinstance(exc, Exception):  # never turn a cancellation into an error
                    raise _unrecorded(action, attempt, lost) from exc
            raise
        _effect.reset(token)
        writing = asyncio.ensure_future(asyncio.to_thread(record_result, action, attempt, result))
        try:
            return cast(T, await asyncio.shield(writing))
        except LedgerError as lost:
            raise _unrecorded(action, attempt, lost) from lost
    finally:
        _once_written(writing, action, go)


def _once_written(writing: asyncio.Future[Any] | None, action: Action, go: Go) -> None:
    """Stop renewing the lease and say the claim's tool is done, after the outcome is written,
    as ``_execute`` does: until then another caller waits for it rather than judge the action
    in doubt. Later, if this task was cancelled while the write ran."""

    def done() -> None:
        action.ledger.heartbeat.release(action.key)
        _owner.finished(go.owner)

    if writing is None or writing.done():
        done()
        return

    def later(written: asyncio.Future[Any]) -> None:
        if not written.cancelled():
            written.exception()  # retrieved: the cancelled caller cannot be told any more
        done()

    writing.add_done_callback(later)


# -- a person's decision in code ---------------------------------------------------------------


def approve(
    tool: Effect[..., Any], /, *args: Any, by: str, reason: str | None = None, **kwargs: Any
) -> ApprovalRequest | None:
    """A person's yes to exactly ``tool(*args, **kwargs)`` in the current run.

    ``by`` and ``reason`` are this function's own; for a tool with parameters of those names use
    ``ledger.approve(ticket, ...)``. Returns None when the action already ran.
    """
    action = _action_of(tool, args, kwargs)
    return action.ledger.approve_action(action, by=by, reason=reason)


def deny(
    tool: Effect[..., Any], /, *args: Any, by: str, reason: str | None = None, **kwargs: Any
) -> ApprovalRequest | None:
    """A person's no to exactly ``tool(*args, **kwargs)`` in the current run."""
    action = _action_of(tool, args, kwargs)
    return action.ledger.deny_action(action, by=by, reason=reason)


def _action_of(tool: Effect[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Action:
    if not isinstance(tool, Effect):
        raise ConfigurationError("c4a.approve/deny take a tool decorated with @c4a.effect")
    return prepare(tool.tool, tool.arguments(args, kwargs), tool.options)


# -- the decorator -----------------------------------------------------------------------------


def inject_credentials(
    tool: str, providers: Mapping[str, str | Callable[[], str]], given: Mapping[str, Any]
) -> dict[str, str]:
    """Fetch each credential at call time: from the named environment variable, or a callable."""
    values: dict[str, str] = {}
    for name, provider in providers.items():
        if name in given:
            raise ConfigurationError(
                f"{tool}: {name} is a credential injected by Call4Agents; do not pass it"
            )
        if callable(provider):
            values[name] = provider()
        elif provider in os.environ:
            values[name] = os.environ[provider]
        else:
            raise ConfigurationError(
                f"{tool}: credential {name} comes from the environment variable {provider}, "
                "which is not set; nothing was run"
            )
    return values


def tool_name(fn: Callable[..., Any], explicit: str | None) -> str:
    """The name that goes into every key of this tool, so it must not drift between runs."""
    if explicit is not None:
        if not explicit.strip():
            raise ConfigurationError("name= must be a non-empty string")
        return explicit
    qualname: str | None = getattr(fn, "__qualname__", None)
    module: str | None = getattr(fn, "__module__", None)
    if not qualname or not module or "<lambda>" in qualname:
        raise ConfigurationError(
            f"cannot derive a stable tool name for {fn!r}: give @c4a.effect(name='send_email'), "
            "a name that stays the same across runs and code changes"
        )
    if module == "__main__":
        module = _main_module_name()
    return f"{module}.{qualname}"


def _main_module_name() -> str:
    # A script run as `python agent.py` is module "__main__" there but "agent" when imported;
    # `python -m pkg.agent` records its real name in __spec__. Either way use the real name, so
    # the tool's keys do not change with how the file was started.
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and spec.name:
        return str(spec.name)
    path: str | None = getattr(main, "__file__", None)
    if path:
        return Path(path).stem
    raise ConfigurationError(
        "a tool defined in an interactive session has no stable module name: give it name="
    )


_NO_DEFAULT: Any = inspect.Parameter.empty
_NAME = operator.itemgetter(0)
# Subscripting Callable builds a new alias object: done once here, not on every call.
_AnyCallable = Callable[..., Any]


def _plain_parameters(signature: inspect.Signature) -> tuple[tuple[str, Any], ...] | None:
    """(name, default) of each parameter when all can be passed by position or keyword; such a
    call binds without ``inspect`` (a few microseconds on every call). None otherwise."""
    params = signature.parameters.values()
    if any(p.kind is not inspect.Parameter.POSITIONAL_OR_KEYWORD for p in params):
        return None
    return tuple((p.name, p.default) for p in params)


def _bind_plain(
    params: tuple[tuple[str, Any], ...], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> dict[str, Any] | None:
    """The arguments by name, defaults applied, as ``Signature.bind`` gives them; None for any
    call it would refuse, so that ``bind`` says what is wrong."""
    if len(args) > len(params):
        return None
    found = dict(zip(map(_NAME, params), args, strict=False))  # no comprehension frame
    used = len(kwargs)
    for name, default in params[len(args) :]:
        if name in kwargs:
            found[name] = kwargs[name]
            used -= 1
        elif default is _NO_DEFAULT:
            return None
        else:
            found[name] = default
    return found if used == 0 else None  # a leftover keyword: unknown, or given twice


class Effect(Generic[P, T]):
    """A tool function made once-only. Call it like the function it wraps."""

    def __init__(self, fn: Callable[P, T], options: EffectOptions) -> None:
        self.fn = fn
        self.options = options
        self.tool = tool_name(fn, options.name)
        self.is_async = inspect.iscoroutinefunction(fn)
        if options.undo is not None:
            register_undo(self.tool, options.undo)
        signature = inspect.signature(fn)
        missing = set(options.credentials) - set(signature.parameters)
        if missing:
            raise ConfigurationError(
                f"{self.tool}: credentials= names {sorted(missing)}, which are not parameters of "
                "the tool"
            )
        # Injected credentials are not arguments: callers never pass them and keys never see them.
        self._signature = signature.replace(
            parameters=[
                p for p in signature.parameters.values() if p.name not in options.credentials
            ]
        )
        params = list(self._signature.parameters)
        # A method's self/cls is the object, not the action: leave it out of the key.
        self._skip_first = bool(params) and params[0] in ("self", "cls")
        self._plain = _plain_parameters(self._signature)
        self._recorded = options.recorded  # read on every call; the options never change
        functools.update_wrapper(self, fn)

    def arguments(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        if self._plain is not None:
            found = _bind_plain(self._plain, args, kwargs)
            if found is not None:
                if self._skip_first:
                    found.pop(next(iter(found)))
                return found
        try:
            bound = self._signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise TypeError(f"{self.tool}: {exc}") from None
        bound.apply_defaults()
        found = dict(bound.arguments)
        if self._skip_first:
            found.pop(next(iter(found)))
        return found

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> T:
        fn = cast(_AnyCallable, self.fn)
        options = self.options
        # Most tools inject nothing: they skip the credential work on every call.
        injected = (
            inject_credentials(self.tool, options.credentials, kwargs)
            if options.credentials
            else {}
        )
        arguments = self.arguments(args, kwargs)
        run = _run.get()
        if run is not None:  # counted for the run's summary (a read is its evidence)
            note_tool(run.run_id, options.kind)
        if not self._recorded:
            return cast(T, fn(*args, **kwargs, **injected))
        action = prepare(self.tool, arguments, options)
        if injected:
            action.secrets += tuple(v for v in injected.values() if len(v) >= 4)
        call: Any = functools.partial(fn, *args, **kwargs, **injected)
        if self.is_async:
            return cast(T, aperform(action, call))
        return cast(T, perform(action, call))

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        return self if instance is None else types.MethodType(self, instance)

    def __repr__(self) -> str:
        return f"<effect {self.tool} kind={self.options.kind}>"


@overload
def effect(fn: Callable[P, T], /) -> Effect[P, T]: ...
@overload
def effect(
    *,
    name: str | None = None,
    kind: Kind = "write",
    key: Callable[..., Any] | None = None,
    ignore: tuple[str, ...] = (),
    redact: tuple[str, ...] = (),
    scope: Literal["args", "call"] = "args",
    retry_in_doubt: bool = False,
    check: Callable[..., Any] | None = None,
    in_doubt_on: tuple[type[BaseException], ...] = (),
    wait: float | None = None,
    lease: float | None = None,
    ledger: LedgerCore | None = None,
    approval: bool | Callable[..., bool] | None = None,
    approval_ttl: float | None = None,
    max_per_run: int | None = None,
    credentials: Mapping[str, str | Callable[[], str]] = ...,
    undo: Callable[..., Any] | None = None,
    find_existing: Callable[..., Any] | None = None,
    escalate_on: tuple[str, ...] = (),
) -> Callable[[Callable[P, T]], Effect[P, T]]: ...
def effect(fn: Callable[P, T] | None = None, /, **options: Any) -> Any:
    """Make a tool once-only per (run, tool, canonical arguments). See EffectOptions."""
    opts = EffectOptions(**options)
    if fn is not None:
        return Effect(fn, opts)
    return lambda f: Effect(f, opts)
