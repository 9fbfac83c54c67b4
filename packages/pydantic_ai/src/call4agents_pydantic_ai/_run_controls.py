"""Budgets and run endings inside a Pydantic AI run: model requests, tokens, cost, delegation.

Model requests are counted in the ledger from ``wrap_model_request``, before each request, with
the run's own usage figures added after the response. Delegate agents called inside a tool with
``usage=ctx.usage`` share the parent's ``RunUsage``: one :class:`Account` per usage object notes
what of it is already in the ledger, so whatever is not (a delegate without ``OnceOnly``, an
attempt Pydantic AI rejected) is counted at the next step boundary instead of being lost.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from contextvars import ContextVar
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from pydantic_ai.messages import InstructionPart, ModelResponse
from pydantic_ai.models import ModelRequestContext
from pydantic_ai.usage import RequestUsage, RunUsage

import call4agents as c4a
from call4agents import Budget, BudgetExceeded, Escalated, Ledger
from call4agents.integration import (
    Trigger,
    count_model_request,
    current_run,
    record_model_usage,
    run_part,
)


@dataclass
class Account:
    """How much of one ``RunUsage`` is already counted in the ledger (or predates the run)."""

    usage: RunUsage
    requests: int
    input_tokens: int
    output_tokens: int
    cost: Decimal

    @classmethod
    def start(cls, usage: RunUsage) -> Account:
        """Everything in the usage before the run starts is someone else's, already counted."""
        return cls(usage, usage.requests, usage.input_tokens, usage.output_tokens, _cost(usage))

    def counted(self, response: ModelResponse | None) -> None:
        """One request counted before it was made, and the usage its response reported."""
        self.requests += 1
        if response is not None:
            self.input_tokens += response.usage.input_tokens
            self.output_tokens += response.usage.output_tokens
            self.cost += _cost(response.usage)

    def behind(self) -> tuple[int, int, int, Decimal]:
        """Requests, tokens and cost in the usage that nobody put in the ledger yet."""
        u = self.usage
        return (
            max(0, u.requests - self.requests),
            max(0, u.input_tokens - self.input_tokens),
            max(0, u.output_tokens - self.output_tokens),
            max(Decimal(0), _cost(u) - self.cost),
        )

    def catch_up(self) -> None:
        u = self.usage
        self.requests = max(self.requests, u.requests)
        self.input_tokens = max(self.input_tokens, u.input_tokens)
        self.output_tokens = max(self.output_tokens, u.output_tokens)
        self.cost = max(self.cost, _cost(u))


# The account of the run whose tools are running: a delegate sharing its RunUsage shares it too.
_account: ContextVar[Account | None] = ContextVar("call4agents_pydantic_ai_account", default=None)


@contextmanager
def account_for(usage: RunUsage) -> Iterator[tuple[Account, bool]]:
    """The account of a run's usage, and whether this run owns it (is its outermost user)."""
    outer = _account.get()
    shared = outer is not None and outer.usage is usage
    account = outer if outer is not None and shared else Account.start(usage)
    token = _account.set(account)
    try:
        yield account, not shared
    finally:
        _account.reset(token)


def budgeted() -> bool:
    """Whether the current run (ours, or an enclosing one we count against) has a budget."""
    run = current_run()
    return run is not None and run.budget is not None


async def before_request(request_context: ModelRequestContext) -> ModelRequestContext:
    """Count one model request (raising BudgetExceeded past a limit); add the wrap-up note."""
    usage = await asyncio.to_thread(count_model_request)
    note = usage.wrap_up_note() if usage is not None else None
    return with_instruction(request_context, note) if note else request_context


async def after_response(response: ModelResponse) -> None:
    """Add the response's tokens (and cost) to the run's counters."""
    await _record(response.usage.input_tokens, response.usage.output_tokens, _cost(response.usage))


async def settle(account: Account) -> None:
    """Put in the ledger what the shared usage holds and nobody counted: delegates' requests.

    Tokens first (the money is spent either way), then each request; past a limit this raises
    BudgetExceeded, which ends the run at this step boundary.
    """
    requests, input_tokens, output_tokens, cost = account.behind()
    if not (requests or input_tokens or output_tokens or cost):
        return
    account.catch_up()
    await _record(input_tokens, output_tokens, cost)
    for _ in range(requests):
        await asyncio.to_thread(count_model_request)


async def _record(input_tokens: int, output_tokens: int, cost: Decimal) -> None:
    run = current_run()
    budget: Budget | None = run.budget if run is not None else None
    # The budget's own token prices win; else the cost Pydantic AI worked out, when it knows one.
    given = None if budget is None or budget.token_prices is not None or not cost else float(cost)
    await asyncio.to_thread(record_model_usage, input_tokens, output_tokens, cost=given)


def with_instruction(request_context: ModelRequestContext, note: str) -> ModelRequestContext:
    """The request with one more instruction line (Pydantic AI's instruction parts)."""
    params = request_context.model_request_parameters
    parts = [*(params.instruction_parts or []), InstructionPart(content=note, dynamic=True)]
    new_params = dataclasses.replace(params, instruction_parts=InstructionPart.sorted(parts))
    return dataclasses.replace(request_context, model_request_parameters=new_params)


def _cost(usage: RunUsage | RequestUsage) -> Decimal:
    return Decimal(usage.cost) if usage.cost is not None else Decimal(0)


# -- endings ----------------------------------------------------------------------------------


def ending_text(exc: BaseException) -> str:
    """The tool result kept in the history for a call that ended the run (the model never
    reads it in this run; a conversation resumed from the history does)."""
    if isinstance(exc, BudgetExceeded):
        return f"Not run: the run's budget is spent ({exc.reason}: {exc.detail}). The run ended."
    if isinstance(exc, Escalated):
        return f"Handed over to a person: {exc.handoff.reason}. The run ended."
    return f"Not run: the run ended ({exc})."


NOT_STARTED = "Not run: the run is ending (a budget limit or an escalation); nothing was started."


def refreshed(exc: BaseException, ledger: Ledger | None) -> BaseException:
    """An escalation raised once sibling calls have finished: its hand-off as it stands now.

    ``c4a.escalate`` snapshots the hand-off when it is called; calls that ran beside the
    escalating one were still running then and have finished since.
    """
    if isinstance(exc, Escalated):
        found = (ledger or _default_ledger()).handoff(exc.run_id)
        if found is not None:
            exc.handoff = found
    return exc


def _default_ledger() -> Ledger:
    from call4agents import default_ledger

    return default_ledger()


def scope(
    run_id: str | None,
    ledger: Ledger | None,
    budget: Budget | None,
    *,
    whole: bool = False,
    trigger: Trigger | None = None,
) -> Any:
    """``c4a.run`` for the conversation: tools, model requests and policy code see the run.

    ``whole``: the block around the agent's whole run (its end is the run's end); otherwise
    a block around one hook Pydantic AI did not carry the run's context into.
    Pydantic AI gives every run a conversation id; a run without one (a future mode) runs
    outside any ``c4a.run``, and its recorded tools say so when they are called.
    """
    if not run_id:
        return nullcontext()
    if whole:
        return c4a.run(run_id, ledger=ledger, budget=budget, trigger=trigger)
    return run_part(run_id, ledger=ledger, budget=budget)
