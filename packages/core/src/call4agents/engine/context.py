"""Which run an action belongs to, and what a running tool can learn about itself.

Both live in ``contextvars``: asyncio tasks inherit them, and so does code run through
:func:`bind` in a thread the user starts (plain threads and thread pools do not copy context).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import secrets
from collections.abc import Callable, Iterator
from contextvars import ContextVar, Token
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal, ParamSpec, TypeVar

from call4agents.model.errors import Call4AgentsError, ConfigurationError

if TYPE_CHECKING:
    from call4agents.engine.budgets import Budget
    from call4agents.engine.ledger_core import LedgerCore


Trigger = Literal["user", "schedule", "webhook", "retry"]

P = ParamSpec("P")
T = TypeVar("T")


@dataclass(frozen=True)
class RunContext:
    run_id: str
    ledger: LedgerCore | None = None
    call_id: str | None = None  # the framework's stable identity of one tool call
    budget: Budget | None = None  # limits on the run's tool calls, counted in the ledger
    budget_run: str | None = None  # whose counters a nested run's calls count against
    # Every budget in force, outermost first, with the run whose counters it is checked
    # against: a nested run's calls count against its own budget and each enclosing one.
    budgets: tuple[tuple[str, Budget], ...] = ()


@dataclass(frozen=True)
class EffectContext:
    """What ``c4a.current()`` returns inside a running tool.

    ``covered`` is True when the ledger records this call: ``key`` names its action and
    ``idempotency_key`` (the key to forward to a provider) is the same on every attempt, in every
    process. It is False for a call an integration runs outside the ledger (an MCP call with no
    client key and no caller identity, a read-only tool): nothing records it, so nothing could tell
    its retry from a new call, and ``key`` and ``idempotency_key`` are fresh for this one call
    (never another call's, so forwarding it stays safe: the provider sees a new request, which is
    all anyone can know of it).
    """

    run_id: str
    tool: str
    key: str
    attempt: int
    call_id: str | None = None
    covered: bool = True

    @property
    def idempotency_key(self) -> str:
        return idempotency_key(self.key)


def idempotency_key(key: str) -> str:
    """The key a tool forwards to its provider (``Idempotency-Key``): stable across attempts."""
    return "c4a-" + key[:48]


_run: ContextVar[RunContext | None] = ContextVar("call4agents_run", default=None)
_effect: ContextVar[EffectContext | None] = ContextVar("call4agents_effect", default=None)


def check_run_id(run_id: object) -> str:
    if not isinstance(run_id, str) or not run_id.strip():
        raise ConfigurationError(
            f"run id {run_id!r} is not usable: give a non-empty string that stays the same "
            "when the agent resumes (a ticket id, a thread id, a job id)"
        )
    if len(run_id) > 512:
        raise ConfigurationError("run id is longer than 512 characters: use a shorter stable id")
    if (not run_id.isascii() and not _encodable(run_id)) or "\x00" in run_id:
        raise ConfigurationError(
            f"run id {run_id!r} holds a NUL or a lone surrogate (bytes that were not valid "
            "UTF-8), which no ledger database can store: decode the id properly, or pass a "
            "stable ASCII form of it (e.g. its hex digest)"
        )
    return run_id


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class tool_call:
    """Mark the framework's stable id of one tool call, for tools declared ``scope="call"``."""

    def __init__(self, call_id: str) -> None:
        self._call_id = check_run_id(call_id)
        self._token: Token[RunContext | None] | None = None

    def __enter__(self) -> tool_call:
        outer = _run.get()
        if outer is None:
            raise ConfigurationError(
                'c4a.tool_call() needs an enclosing run: wrap it in `with c4a.run("<stable id>")`'
            )
        self._token = _run.set(replace(outer, call_id=self._call_id))
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._token is not None
        _run.reset(self._token)


def current_run() -> RunContext | None:
    return _run.get()


def current() -> EffectContext:
    """Inside a tool run through Call4Agents: its run, key, idempotency key and attempt.

    Inside a tool that an integration runs without the ledger, it says so: ``covered`` is False
    and the keys are fresh for this call (see :class:`EffectContext`). Outside any tool it raises
    ``Call4AgentsError``.
    """
    found = _effect.get()
    if found is None:
        raise Call4AgentsError(
            "c4a.current() is only available inside a tool decorated with @c4a.effect "
            "(or called through an integration's OnceOnly)"
        )
    return found


@contextlib.contextmanager
def uncovered(run_id: str, tool: str, call_id: str | None = None) -> Iterator[EffectContext]:
    """Within it, ``c4a.current()`` describes a tool call run outside the ledger
    (``covered=False``), with keys that are this call's alone."""
    key = secrets.token_hex(32)  # the shape of an action key, shared with no other call
    ctx = EffectContext(run_id, tool, key, 1, call_id, covered=False)
    token = _effect.set(ctx)
    try:
        yield ctx
    finally:
        _effect.reset(token)


def bind(fn: Callable[P, T]) -> Callable[P, T]:
    """Carry the current run into another thread: ``pool.submit(c4a.bind(fn), ...)``.

    Each call runs in a fresh copy of the context captured here, so one bound function may run
    in several threads at once.
    """
    captured = contextvars.copy_context()

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        return captured.copy().run(fn, *args, **kwargs)

    return wrapper


def soon(work: Callable[..., T], *args: Any) -> T | None:
    """``work(*args)`` now, giving what it returns; or, called on a running event loop's thread
    (a plain ``with`` inside a coroutine, a framework's hook), in a worker thread not waited
    for, giving None: the event loop never waits on the database."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return work(*args)
    loop.run_in_executor(None, work, *args)
    return None
