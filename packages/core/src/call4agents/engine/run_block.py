"""A run's block: ``with c4a.run(run_id):`` opens it, notes what it did, and says how it ended.

The run itself (which run the code belongs to) is a context variable in :mod:`context`; this
module is the block that sets it, above the run's notes, budgets and observers it feeds.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from types import TracebackType
from typing import TYPE_CHECKING

from call4agents.engine import observe
from call4agents.engine.budgets import start_clock
from call4agents.engine.context import RunContext, Trigger, _run, check_run_id, soon
from call4agents.engine.endings import Escalated
from call4agents.engine.run_notes import (
    afinish,
    check_trigger,
    ending_of,
    enter,
    finish,
    leave,
    leave_steps,
    look_back,
)
from call4agents.model.errors import BudgetExceeded

if TYPE_CHECKING:
    from contextvars import Token

    from call4agents.engine.budgets import Budget
    from call4agents.engine.ledger_core import LedgerCore
    from call4agents.engine.run_notes import Notes


class run:
    """Everything called inside belongs to run ``run_id``, the id that survives resumes.

    Works with ``with`` and ``async with``. Nesting replaces the run for the inner block.

    ``trigger`` says what started it: ``"user"``, ``"schedule"``, ``"webhook"`` (or
    ``"retry"``). The ledger itself records ``"retry"`` when the run is entered again after it
    had recorded actions. Entering reads the run's history once; when the outermost block of the
    run leaves, one statement records the entry (trigger, time, tool calls, whether a ``read``
    tool was called) for ``call4agents show``/``stats``, and the current span gets the run's
    attributes.
    """

    # A block that is only part of a run (an integration's scope around one tool call or model
    # request) notes calls but never ends the run: that is the whole run's block's to do.
    _whole = True

    def __init__(
        self,
        run_id: str,
        *,
        ledger: LedgerCore | None = None,
        budget: Budget | None = None,
        trigger: Trigger | None = None,
    ) -> None:

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
            soon(look_back, notes)
        return self._push()

    def _note_entry(self) -> Notes | None:
        if not self._whole:
            return None

        return enter(self._ctx.run_id, self._ctx.ledger, self._trigger)

    def _start_clock(self) -> None:
        """Note in the ledger when this run first ran with its budget: its deadline's start."""
        if self._ctx.budget is not None:
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
        notes = self._pop(exc)
        if notes is not None:
            finish(notes, exc, off_loop=True)

    def _pop(self, exc: BaseException | None) -> Notes | None:
        """Leave the block: the outer run is current again, an ending is marked, and the notes
        to write if this block ended the run's entry."""
        _run.reset(self._tokens.pop())
        if exc is not None:
            _mark_ending(self._ctx.run_id, exc)
        return self._left(exc)

    def _left(self, exc: BaseException | None) -> Notes | None:

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
            await asyncio.to_thread(look_back, notes)
        return self._push()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        notes = self._pop(exc)
        if notes is not None:
            await afinish(notes, exc)


class run_part(run):
    """``c4a.run`` for a block that is only part of a run: an integration's scope around one
    tool call or model request. Calls inside are noted on the run, but leaving it does not end
    the run (the whole run's block does, or ``integration.run_finished`` at its final answer)."""

    _whole = False


def _mark_ending(run_id: str, exc: BaseException) -> None:
    """An escalation or a budget cut leaving the run: the span around the run carries it too."""

    if isinstance(exc, Escalated):
        observe.telemetry().run_ended(exc.run_id, "escalated", count=False)
    elif isinstance(exc, BudgetExceeded):
        observe.telemetry().run_ended(exc.run_id, exc.reason, count=False)
