"""A run's budget: limits on its tool calls, model requests, cost and time, counted in the ledger.

``Budget`` is given to ``c4a.run(..., budget=)``. Each tool call is checked and counted in the
transaction that claims it (``budget_gate``); integrations call ``count_model_request`` before
each model request and ``record_model_usage`` after it. A run past a limit ends with
:class:`BudgetExceeded`, recorded as its ending.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import TYPE_CHECKING

from call4agents.engine.context import RunContext, current_run, soon
from call4agents.engine.default import default_ledger, default_or_none
from call4agents.engine.endings import record_status_in
from call4agents.engine.run_notes import note_spent
from call4agents.model.errors import (
    BudgetExceeded,
    Call4AgentsError,
    ConfigurationError,
    LedgerError,
)
from call4agents.storage import run_controls
from call4agents.storage.run_rows import COST
from call4agents.storage.store import Conn, Gate

log = logging.getLogger("call4agents")

if TYPE_CHECKING:
    from call4agents.engine.action import Action
    from call4agents.engine.ledger_core import LedgerCore

STEP_LIMIT = "step_limit"
BUDGET = "budget"
DEADLINE = "deadline"
_CALLS = "tool_calls"
_REQUESTS = "model_requests"
_TOKENS_IN = "input_tokens"
_TOKENS_OUT = "output_tokens"
_STARTED = run_controls.STARTED


@dataclass(frozen=True)
class Budget:
    """Limits on a run, counted in the ledger: a resume or a second worker continues the count.

    Args:
        max_tool_calls: tool executions the run may start in all (a repeat served from the
            ledger is not an execution and costs nothing).
        max_calls_per_tool: executions each tool may start.
        max_model_requests: model requests the run may make, where the integration sees them
            (counted by ``c4a.count_model_request()``).
        max_cost: money the run may spend on its model, fed from the framework's token counts
            priced by ``token_prices`` (or by a cost given to ``c4a.record_model_usage``).
        token_prices: ``(input, output)`` price per million tokens, in the currency of
            ``max_cost``.
        deadline: seconds (or a timedelta) the run may keep acting after it was first entered
            with this budget (by the database's clock; a resume keeps the original start).
        soft: the share of any limit at which ``c4a.budget_usage().soft_reached`` turns true,
            so the agent can be told to wrap up before the hard cut.
    """

    max_tool_calls: int | None = None
    max_calls_per_tool: int | None = None
    max_model_requests: int | None = None
    max_cost: float | None = None
    token_prices: tuple[float, float] | None = None
    deadline: float | timedelta | None = None
    soft: float = 0.8

    def __post_init__(self) -> None:
        for name in ("max_tool_calls", "max_calls_per_tool", "max_model_requests"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ConfigurationError(f"Budget({name}=...) must be a whole number, at least 1")
        if self.max_cost is not None and not self.max_cost > 0:
            raise ConfigurationError("Budget(max_cost=...) must be a positive amount")
        prices = self.token_prices
        if prices is not None and (len(prices) != 2 or any(not p >= 0 for p in prices)):
            raise ConfigurationError(
                "Budget(token_prices=...) is (input, output) price per million tokens: (3.0, 15.0)"
            )
        if isinstance(self.deadline, timedelta):
            object.__setattr__(self, "deadline", self.deadline.total_seconds())
        if self.deadline is not None and float(self.deadline) <= 0:  # type: ignore[arg-type]
            raise ConfigurationError("Budget(deadline=...) must be a positive number of seconds")
        if not 0 < self.soft <= 1:
            raise ConfigurationError("Budget(soft=...) is a share of the limit, in (0, 1]")

    @property
    def deadline_seconds(self) -> float | None:
        d = self.deadline
        return d.total_seconds() if isinstance(d, timedelta) else d

    def price(self, input_tokens: int, output_tokens: int) -> float:
        """What these tokens cost at ``token_prices`` (0 when no prices are set)."""
        if self.token_prices is None:
            return 0.0
        price_in, price_out = self.token_prices
        return (input_tokens * price_in + output_tokens * price_out) / 1_000_000


@dataclass(frozen=True)
class BudgetUsage:
    """How much of its budget a run has spent (``c4a.budget_usage()``)."""

    run_id: str
    tool_calls: int
    per_tool: dict[str, int]
    elapsed: float | None  # seconds since the run first ran with its budget, by the database clock
    budget: Budget
    model_requests: int = 0
    cost: float = 0.0
    input_tokens: int = 0
    output_tokens: int = 0
    # What each enclosing run's budget has spent (a sub-agent's parents): the agent is told to
    # wrap up when any budget it spends is near its limit, not only its own.
    enclosing: tuple[BudgetUsage, ...] = ()

    def shares(self) -> list[float]:
        b, found = self.budget, []
        if b.max_tool_calls:
            found.append(self.tool_calls / b.max_tool_calls)
        if b.max_calls_per_tool and self.per_tool:
            found.append(max(self.per_tool.values()) / b.max_calls_per_tool)
        if b.max_model_requests:
            found.append(self.model_requests / b.max_model_requests)
        if b.max_cost:
            found.append(self.cost / b.max_cost)
        if b.deadline_seconds is not None and self.elapsed is not None:
            found.append(self.elapsed / b.deadline_seconds)
        return found

    @property
    def soft_reached(self) -> bool:
        """At or past the soft threshold of some limit (this run's or an enclosing run's):
        time to tell the agent to wrap up."""
        mine = any(share >= self.budget.soft for share in self.shares())
        return mine or any(outer.soft_reached for outer in self.enclosing)

    def wrap_up_note(self) -> str | None:
        """A line for the model once the soft threshold is passed; None before it."""
        if not self.soft_reached:
            return None
        spent = max([*self.shares(), *(share for o in self.enclosing for share in o.shares())])
        return (
            f"Note from the run's budget: {spent:.0%} of a limit is spent. Finish the task with "
            "what you have, or stop and say what remains; do not start new work."
        )


def budget_usage(run_id: str | None = None, *, ledger: LedgerCore | None = None) -> BudgetUsage:
    """The current run's budget and what it spent; for the agent's "wrap up soon" prompt."""
    budget, counted, ledger = _current_budget("budget_usage()", ledger)
    wanted = run_id or counted
    outer = [] if wanted != counted else [b for b in _distinct(_chain()) if b[0] != counted]
    values, now = run_controls.counted(ledger.store, [wanted, *(r for r, _ in outer)])
    enclosing = tuple(_usage(r, values[r], now, b) for r, b in outer)
    return replace(_usage(wanted, values[wanted], now, budget), enclosing=enclosing)


def _chain() -> tuple[tuple[str, Budget], ...]:
    run = current_run()
    return run.budgets if run is not None else ()


def spending_text(ledger: LedgerCore, run_id: str) -> str | None:
    """What a run's budget counted, in one line for ``call4agents show``; None if nothing."""
    counted, _ = run_controls.counted(ledger.store, [run_id])
    # Names under "run." are the run's own record (run_notes), not what a budget counted.
    values = {k: v for k, v in counted[run_id].items() if not k.startswith("run.")}
    if not values:
        return None
    per_tool = ", ".join(
        f"{k[5:]}: {int(v)}" for k, v in sorted(values.items()) if k.startswith("tool:")
    )
    parts = [f"{int(values.get(_CALLS, 0))} tool calls" + (f" ({per_tool})" if per_tool else "")]
    if _REQUESTS in values:
        parts.append(f"{int(values[_REQUESTS])} model requests")
    if _TOKENS_IN in values or _TOKENS_OUT in values:
        tokens_in, tokens_out = int(values.get(_TOKENS_IN, 0)), int(values.get(_TOKENS_OUT, 0))
        parts.append(f"{tokens_in} input / {tokens_out} output tokens")
    if values.get(COST):
        parts.append(f"cost {values[COST]:.4g}")
    return "Budget spent: " + ", ".join(parts)


def _current_budget(what: str, ledger: LedgerCore | None) -> tuple[Budget, str, LedgerCore]:

    run = current_run()
    if run is None or run.budget is None:
        raise ConfigurationError(f"{what} needs a run with a budget: c4a.run(id, budget=...)")
    return run.budget, run.budget_run or run.run_id, ledger or run.ledger or default_ledger()


def _usage(run_id: str, values: dict[str, float], now: float, budget: Budget) -> BudgetUsage:
    started = values.get(_STARTED)
    return BudgetUsage(
        run_id=run_id,
        tool_calls=int(values.get(_CALLS, 0)),
        per_tool={k[5:]: int(v) for k, v in values.items() if k.startswith("tool:")},
        elapsed=None if started is None else now - started,
        budget=budget,
        model_requests=int(values.get(_REQUESTS, 0)),
        cost=values.get(COST, 0.0),
        input_tokens=int(values.get(_TOKENS_IN, 0)),
        output_tokens=int(values.get(_TOKENS_OUT, 0)),
    )


def budget_gate(action: Action, run: RunContext, inner: Gate | None) -> Gate | None:
    """The claim's gate with the budgets of ``run`` (the current run, which has some) in front:
    checked and counted in the claim's own transaction, so two workers cannot both take the last
    call, and a crash cannot lose a count.

    Every budget in force is checked (a nested run's own and each enclosing run's), and the
    call is counted once in each of their runs' counters.
    """
    chain = run.budgets
    if action.run_id != run.run_id and action.run_id not in {r for r, _ in chain}:
        return inner  # an action of another run, keyed explicitly: not these budgets'
    dialect = action.ledger.store.dialect

    def gate(conn: Conn, attempt: int) -> Call4AgentsError | None:
        counters = _lock_all(conn, dialect, chain)
        for counted, budget in chain:
            values, elapsed = counters[counted]
            over = _over_budget(values, elapsed, budget) or _over_tool_limits(
                values, budget, action.tool
            )
            if over is not None:
                # Recorded in the claim's transaction, which commits: the refusal is returned.
                cut = BudgetExceeded(run_id=counted, tool=action.tool, **over)
                _record_refusal(conn, dialect, cut)
                return cut
        refusal = inner(conn, attempt) if inner is not None else None
        if refusal is None:
            for counted in counters:
                run_controls.add(conn, dialect, counted, {_CALLS: 1, f"tool:{action.tool}": 1})
        return refusal

    return gate


def _lock_all(
    conn: Conn, dialect: str, chain: Sequence[tuple[str, Budget]]
) -> dict[str, tuple[dict[str, float], float]]:
    """Each budgeted run's counters under its lock, taken in run-id order: two workers whose
    runs nest the same runs differently still take the locks in one order, so never deadlock."""
    return {r: run_controls.locked(conn, dialect, r) for r in sorted({r for r, _ in chain})}


def start_clock(run_id: str, ledger: LedgerCore | None) -> None:
    """Record when run ``run_id`` was first entered with a budget, by the database's clock.

    The deadline counts from here; a resume (a new process) finds the row and keeps the
    original start. Each process writes it once per run, so re-entering a run for every step
    (as some integrations do) adds no write per step. Without any ledger open yet, the run's
    first counted step starts the clock instead.

    Entered with a plain ``with`` inside a coroutine (as framework hooks do), the write goes to
    a worker thread and is not waited for: the event loop never waits on the database, and a
    counted step that gets there first starts the clock in its own transaction just the same.
    A database fault here is logged, never raised: that first counted step writes the start.
    """

    ledger = ledger or default_or_none()
    if ledger is None or run_id in _clock_started.get(ledger, ()):
        return
    soon(_write_start, ledger, run_id)


def _write_start(ledger: LedgerCore, run_id: str) -> None:
    try:
        with ledger.store.tx() as conn:
            run_controls.start(conn, ledger.store.dialect, run_id)
    except LedgerError as exc:
        # Not lost: the run's first counted step records the start in its claim instead, so a
        # database fault surfaces there (or at the first effect), never on entering the run.
        log.warning("could not record a run's start yet: %s", exc)
        return
    seen = _clock_started.setdefault(ledger, set())
    if len(seen) >= _CLOCKS_KEPT:
        seen.clear()  # forgetting only costs one more write that changes nothing
    seen.add(run_id)


# The runs whose clock this process has started, by ledger: entering them again writes nothing.
_clock_started: weakref.WeakKeyDictionary[LedgerCore, set[str]] = weakref.WeakKeyDictionary()
_CLOCKS_KEPT = 10_000


def count_model_request(*, ledger: LedgerCore | None = None) -> BudgetUsage | None:
    """Check the current run's budgets before a model request and count it; integrations call it.

    Raises :class:`BudgetExceeded` (``step_limit`` for ``max_model_requests``, ``budget`` for
    ``max_cost``, ``deadline``) before the request is made, recording it as the run's ending.
    Every budget in force is checked and counted (a nested run's and its parents'). Returns the
    innermost budget's usage after counting (for a wrap-up note), or None without a budget.
    """
    run = current_run()
    if run is None or run.budget is None:
        return None
    _, counted, ledger = _current_budget("count_model_request()", ledger)
    store, dialect = ledger.store, ledger.store.dialect
    with store.tx() as conn:
        counters = _lock_all(conn, dialect, run.budgets)
        refusal = _model_request_refusal(counters, run.budgets)
        if refusal is None:
            for name in counters:
                run_controls.add(conn, dialect, name, {_REQUESTS: 1})
            usages = {}
            for name, each in _distinct(run.budgets):
                values, elapsed = counters[name]
                values[_REQUESTS] = values.get(_REQUESTS, 0) + 1
                usages[name] = _usage(name, values, values[_STARTED] + elapsed, each)
            mine = usages.pop(counted)  # the chain always holds the run being counted
            return replace(mine, enclosing=tuple(usages.values()))
        _record_refusal(conn, dialect, refusal)  # committed as the block ends, then raised
    raise refusal


def _model_request_refusal(
    counters: Mapping[str, tuple[dict[str, float], float]],
    chain: Sequence[tuple[str, Budget]],
) -> BudgetExceeded | None:
    for counted, budget in chain:
        values, elapsed = counters[counted]
        over = _over_budget(values, elapsed, budget)
        limit = budget.max_model_requests
        if over is None and limit is not None and values.get(_REQUESTS, 0) >= limit:
            over = {"reason": STEP_LIMIT, "detail": f"{limit} model requests"}
        if over is not None:
            return BudgetExceeded(run_id=counted, tool="model request", **over)
    return None


def record_model_usage(
    input_tokens: int = 0,
    output_tokens: int = 0,
    *,
    cost: float | None = None,
    ledger: LedgerCore | None = None,
) -> None:
    """Add one model response's tokens (and cost) to the current run's budget counters.

    ``cost`` defaults to the tokens priced by ``Budget(token_prices=...)``. The money is already
    spent, so this never refuses; the next tool call or model request past ``max_cost`` does.
    Nothing is counted outside a run with a budget.
    """
    run = current_run()
    if run is None or run.budget is None:
        return
    _, _, ledger = _current_budget("record_model_usage()", ledger)
    if input_tokens < 0 or output_tokens < 0 or (cost is not None and cost < 0):
        raise ConfigurationError("record_model_usage() takes token counts and a cost of 0 or more")
    with ledger.store.tx() as conn:
        # Each enclosing run pays too, priced by its own budget's token prices.
        for name, each in _distinct(run.budgets):
            spent = each.price(input_tokens, output_tokens) if cost is None else cost
            run_controls.add(
                conn,
                ledger.store.dialect,
                name,
                {_TOKENS_IN: input_tokens, _TOKENS_OUT: output_tokens, COST: spent},
            )
    for name, _ in run.budgets:
        note_spent(name)  # its span gets the new total as its entry ends


def _distinct(chain: Sequence[tuple[str, Budget]]) -> list[tuple[str, Budget]]:
    """One budget per counted run (the innermost given for it), so nothing is counted twice."""
    return list({name: budget for name, budget in chain}.items())


def _over_budget(
    values: Mapping[str, float], elapsed: float, budget: Budget
) -> dict[str, str] | None:
    """The limits every step shares: the deadline and the cost ceiling."""
    deadline = budget.deadline_seconds
    if deadline is not None and elapsed >= deadline:
        return {"reason": DEADLINE, "detail": f"{deadline:g}s after the run started"}
    if budget.max_cost is not None and values.get(COST, 0.0) >= budget.max_cost:
        spent = values.get(COST, 0.0)
        return {"reason": BUDGET, "detail": f"spent {spent:.4g} of {budget.max_cost:g}"}
    return None


def _over_tool_limits(
    values: Mapping[str, float], budget: Budget, tool: str
) -> dict[str, str] | None:
    calls, per_tool = int(values.get(_CALLS, 0)), int(values.get(f"tool:{tool}", 0))
    if budget.max_tool_calls is not None and calls >= budget.max_tool_calls:
        return {"reason": STEP_LIMIT, "detail": f"{budget.max_tool_calls} tool calls"}
    if budget.max_calls_per_tool is not None and per_tool >= budget.max_calls_per_tool:
        return {"reason": STEP_LIMIT, "detail": f"{budget.max_calls_per_tool} calls of {tool}"}
    return None


def _record_refusal(conn: Conn, dialect: str, refusal: BudgetExceeded) -> None:
    data = {"reason": refusal.reason, "tool": refusal.tool, "detail": refusal.detail}
    record_status_in(conn, dialect, refusal.run_id, refusal.reason, refusal.detail, "budget", data)
