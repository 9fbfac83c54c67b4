"""Which run an action belongs to, and what a running tool can learn about itself.

Both live in ``contextvars``: asyncio tasks inherit them, and so does code run through
:func:`bind` in a thread the user starts (plain threads and thread pools do not copy context).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import Callable
from contextvars import ContextVar, Token
from dataclasses import dataclass, replace
from types import TracebackType
from typing import TYPE_CHECKING, Literal, ParamSpec, TypeVar

from call4agents.model.errors import Call4AgentsError, ConfigurationError

if TYPE_CHECKING:
    from call4agents.controls.runs import Budget
    from call4agents.facade.ledger import Ledger

    from .run_notes import Notes

Trigger = Literal["user", "schedule", "webhook", "retry"]

P = ParamSpec("P")
T = TypeVar("T")


@dataclass(frozen=True)
class RunContext:
    run_id: str
    ledger: Ledger | None = None
    call_id: str | None = None  # the framework's stable identity of one tool call
    budget: Budget | None = None  # limits on the run's tool calls, counted in the ledger
    budget_run: str | None = None  # whose counters a nested run's calls count against
    # Every budget in force, outermost first, with the run whose counters it is checked
    # against: a nested run's calls count against its own budget and each enclosing one.
    budgets: tuple[tuple[str, Budget], ...] = ()


@dataclass(frozen=True)
class EffectContext:
    """What ``c4a.current()`` returns inside a running tool."""

    run_id: str
    tool: str
    key: str
    idempotency_key: str
    attempt: int
    call_id: str | None = None


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


class run:
    """Everything called inside belongs to run ``run_id``, the id that survives resumes.

    Works with ``with`` and ``async with``. Nesting replaces the run for the inner block.

    ``trigger`` says what started it: ``"user"``, ``"schedule"``, ``"webhook"`` (or
    ``"retry"``). The ledger itself records ``"retry"`` when the run is entered again after it
    had recorded actions. When the outermost block of the run leaves, one small write records
    the entry (trigger, time, tool calls, whether a ``read`` tool was called) for
    ``call4agents show``/``stats``, and the current span gets the run's attributes.
    """

    # A block that is only part of a run (an integration's scope around one tool call or model
    # request) notes calls but never ends the run: that is the whole run's block's to do.
    _whole = True

    def __init__(
        self,
        run_id: str,
        *,
        ledger: Ledger | None = None,
        budget: Budget | None = None,
        trigger: Trigger | None = None,
    ) -> None:
        from .run_notes import check_trigger

        self._trigger = check_trigger(trigger)
        self._ctx = RunContext(check_run_id(run_id), ledger, budget=budget)
        self._tokens: list[Token[RunContext | None]] = []

    @property
    def run_id(self) -> str:
        return self._ctx.run_id

    def __enter__(self) -> run:
        self._start_clock()
        notes = self._note_entry()
        if notes is not None:
            from .run_notes import enter_soon

            enter_soon(notes)
        return self._push()

    def _note_entry(self) -> Notes | None:
        if not self._whole:
            return None
        from .run_notes import enter

        return enter(self._ctx.run_id, self._ctx.ledger, self._trigger)

    def _start_clock(self) -> None:
        """Note in the ledger when this run first ran with its budget: its deadline's start."""
        if self._ctx.budget is not None:
            from call4agents.controls.runs import start_clock

            start_clock(self._ctx.run_id, self._ctx.ledger)

    def _push(self) -> run:
        ctx, outer = self._ctx, _run.get()
        enclosing = outer.budgets if outer is not None else ()
        if ctx.budget is None and outer is not None and outer.budget is not None:
            # A nested agent (or an agent used as a tool) spends its parent's budget.
            ctx = replace(
                ctx,
                budget=outer.budget,
                budget_run=outer.budget_run or outer.run_id,
                budgets=enclosing,
            )
        elif ctx.budget is not None:
            # Its own budget as well as every enclosing one: a sub-agent cannot escape its
            # parent's limits by having limits of its own.
            mine = (ctx.run_id, ctx.budget)
            ctx = replace(ctx, budgets=(*(b for b in enclosing if b != mine), mine))
        self._tokens.append(_run.set(ctx))
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        _run.reset(self._tokens.pop())
        if exc is not None:
            _mark_ending(self._ctx.run_id, exc)
        notes = self._left(exc)
        if notes is not None:
            from .run_notes import finish, settle

            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                finish(notes, exc)
                return
            # A plain `with` inside a coroutine: the write goes to a worker thread, and the span
            # gets what is known in memory (the ledger's retry verdict is in the record).
            loop.run_in_executor(None, settle, notes, exc)
            finish(notes, exc, write=False)

    def _left(self, exc: BaseException | None) -> Notes | None:
        from .run_notes import ending_of, leave, leave_steps

        if self._whole:
            return leave(self._ctx.run_id)
        if exc is not None and ending_of(exc)[0] not in (None, "error"):
            # An escalation or a budget cut leaving a step ends the run a step opened.
            return leave_steps(self._ctx.run_id)
        return None

    async def __aenter__(self) -> run:
        if self._ctx.budget is not None:
            # The ledger write that starts the clock stays off the event loop's thread.
            await asyncio.to_thread(self._start_clock)
        notes = self._note_entry()
        if notes is not None:
            from .run_notes import look_back

            await asyncio.to_thread(look_back, notes)
        return self._push()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        _run.reset(self._tokens.pop())
        if exc is not None:
            _mark_ending(self._ctx.run_id, exc)
        notes = self._left(exc)
        if notes is not None:
            from .run_notes import afinish

            await afinish(notes, exc)


class run_part(run):
    """``c4a.run`` for a block that is only part of a run: an integration's scope around one
    tool call or model request. Calls inside are noted on the run, but leaving it does not end
    the run (the whole run's block does, or ``integration.run_finished`` at its final answer)."""

    _whole = False


def _mark_ending(run_id: str, exc: BaseException) -> None:
    """An escalation or a budget cut leaving the run: the span around the run carries it too."""
    from call4agents.controls import observe
    from call4agents.controls.runs import BudgetExceeded, Escalated

    if isinstance(exc, Escalated):
        observe.run_ended(exc.run_id, "escalated", count=False)
    elif isinstance(exc, BudgetExceeded):
        observe.run_ended(exc.run_id, exc.reason, count=False)


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
    """Inside a tool run through Call4Agents: its run, key, idempotency key and attempt."""
    found = _effect.get()
    if found is None:
        raise Call4AgentsError(
            "c4a.current() is only available inside a tool decorated with @c4a.effect "
            "(or called through an integration's OnceOnly)"
        )
    return found


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


def _enter_effect(ctx: EffectContext) -> Token[EffectContext | None]:
    return _effect.set(ctx)


def _exit_effect(token: Token[EffectContext | None]) -> None:
    _effect.reset(token)
