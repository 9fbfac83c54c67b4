"""How a run ended when a run control ended it: escalated to a person, undone, partly undone.

One row per such run in ``c4a_runs``. ``details`` is a JSON object with one section per control
(``"escalation"``, ``"undo"``), so undoing an escalated run keeps the escalation's hand-off.

Escalation is a legitimate ending, not a failure: ``c4a.escalate(...)`` records why the agent
stopped and what is left, then raises :class:`Escalated` for the caller to catch and hand on.
"""

from __future__ import annotations

import asyncio
import json
import logging
import weakref
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import TYPE_CHECKING, Any, NoReturn

from sqlalchemy import Connection, select, update

from call4agents.engine.context import _effect, current_run
from call4agents.engine.default import default_ledger, default_or_none
from call4agents.engine.verdicts import is_in_doubt_error
from call4agents.model.errors import Call4AgentsError, ConfigurationError, LedgerError
from call4agents.storage.store import Gate, dialect_insert, now_sql
from call4agents.storage.tables import run_counters, runs

from . import observe

log = logging.getLogger("call4agents")

if TYPE_CHECKING:
    from call4agents.engine.effect import Action
    from call4agents.engine.ledger import EffectRecord, LedgerCore

ESCALATED = "escalated"
UNDONE = "undone"
PARTLY_UNDONE = "partly_undone"
_ID_FIELDS = ("id", "external_id")


@dataclass(frozen=True)
class RunStatus:
    """A run's ending as recorded by a run control (``ledger.run_status(run_id)``)."""

    run_id: str
    status: str
    reason: str | None
    details: dict[str, Any]
    created_at: float
    updated_at: float


def record_status(
    ledger: LedgerCore, run_id: str, status: str, reason: str | None, section: str, data: Any
) -> None:
    """Set the run's ending and one section of its details, keeping the other sections."""
    with ledger.store.tx() as conn:
        record_status_in(conn, ledger.store.dialect, run_id, status, reason, section, data)


def record_status_in(
    conn: Connection,
    dialect: str,
    run_id: str,
    status: str,
    reason: str | None,
    section: str,
    data: Any,
) -> None:
    """``record_status`` inside a transaction the caller holds (the claim's, for budgets)."""
    now = now_sql(dialect)
    insert = dialect_insert(dialect)
    # Make sure the row exists, then update it under the row lock: two controls at once
    # (an undo while escalating) each keep the other's section.
    conn.execute(
        insert(runs)
        .values(
            run_id=run_id,
            status=status,
            reason=reason,
            details="{}",
            created_at=now,
            updated_at=now,
        )
        .on_conflict_do_nothing(index_elements=["run_id"])
    )
    stmt = select(runs.c.details).where(runs.c.run_id == run_id)
    if dialect == "postgresql":
        stmt = stmt.with_for_update()
    details = json.loads(conn.execute(stmt).scalar_one() or "{}")
    details[section] = data
    conn.execute(
        update(runs)
        .where(runs.c.run_id == run_id)
        .values(
            status=status,
            reason=reason,
            details=json.dumps(details, default=str),
            updated_at=now,
        )
    )
    observe.run_ended(run_id, status)


def run_status(ledger: LedgerCore, run_id: str) -> RunStatus | None:
    with ledger.store.read() as conn:
        row = conn.execute(select(runs).where(runs.c.run_id == run_id)).mappings().first()
    return None if row is None else _status(dict(row))


def run_endings(ledger: LedgerCore, status: str | None, *, limit: int) -> list[RunStatus]:
    stmt = select(runs).order_by(runs.c.updated_at.desc()).limit(limit)
    if status is not None:
        stmt = stmt.where(runs.c.status == status)
    with ledger.store.read() as conn:
        return [_status(dict(row)) for row in conn.execute(stmt).mappings()]


def _status(row: Mapping[str, Any]) -> RunStatus:
    return RunStatus(
        run_id=row["run_id"],
        status=row["status"],
        reason=row["reason"],
        details=json.loads(row["details"] or "{}"),
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )


# -- escalation -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Handoff:
    """What the person taking over a run needs, so nothing is fired twice.

    ``done`` lists each succeeded action with its result and any external ids found in it (the
    ``id``/``*_id`` fields of a dict result); ``in_doubt`` the actions that may or may not have
    happened (also ones still running); ``failed`` the ones that did not act.
    """

    run_id: str
    reason: str
    blocking_fact: str | None
    what_remains: list[str]
    done: list[dict[str, Any]] = field(default_factory=list)
    in_doubt: list[dict[str, Any]] = field(default_factory=list)
    failed: list[dict[str, Any]] = field(default_factory=list)
    escalated_at: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "status": ESCALATED,
            "reason": self.reason,
            "blocking_fact": self.blocking_fact,
            "what_remains": self.what_remains,
            "done": self.done,
            "in_doubt": self.in_doubt,
            "failed": self.failed,
            "escalated_at": self.escalated_at,
        }

    def text(self) -> str:
        """The hand-off as a person reads it (``call4agents show RUN`` prints this)."""
        lines = [f"Run {self.run_id} was escalated: {self.reason}"]
        if self.blocking_fact:
            lines.append(f"Blocking fact: {self.blocking_fact}")
        lines.append("Done (do not do these again):" if self.done else "Done: nothing")
        for item in self.done:
            ids = ", ".join(f"{k}={v}" for k, v in item["external_ids"].items())
            result = json.dumps(item["result"], default=str, ensure_ascii=False)
            lines.append(f"  - {item['tool']} {_args(item)} -> {_cut(result)}")
            if ids:
                lines.append(f"    external ids: {ids}")
        if self.in_doubt:
            lines.append("In doubt (check before doing them again):")
            lines.extend(f"  - {i['tool']} {_args(i)}: {i['why']}" for i in self.in_doubt)
        if self.failed:
            lines.append("Failed (they did not act):")
            lines.extend(f"  - {i['tool']} {_args(i)}: {i['why']}" for i in self.failed)
        lines.append("What remains:" if self.what_remains else "What remains: nothing stated")
        lines.extend(f"  - {step}" for step in self.what_remains)
        return "\n".join(lines)


def _args(item: Mapping[str, Any]) -> str:
    return _cut(json.dumps(item["args"], separators=(",", ":"), default=str), 80)


def _cut(text: str, width: int = 100) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


class Escalated(Exception):  # a signal named for what happened, not an error
    """The run ended by handing over to a person (``c4a.escalate``): a legitimate ending.

    Catch it around the run: ``exc.handoff`` (a :class:`Handoff`, ``.as_dict()`` for a ticketing
    system) says what was done, what is in doubt, what remains and what blocks. It is not a
    ``Call4AgentsError``, so integrations let it end the agent's run instead of showing it to the
    model as a tool error; raised inside a tool, that tool's action is recorded as failed.
    """

    def __init__(self, handoff: Handoff) -> None:
        self.handoff = handoff
        self.run_id = handoff.run_id
        super().__init__(
            f"run {handoff.run_id!r} was escalated to a person: {handoff.reason}. "
            f"`call4agents show {handoff.run_id}` has the hand-off."
        )


def escalate(
    reason: str,
    *,
    what_remains: str | Iterable[str] = (),
    blocking_fact: str | None = None,
    run_id: str | None = None,
    ledger: LedgerCore | None = None,
) -> NoReturn:
    """End the current run as ``escalated``: record the hand-off, then raise :class:`Escalated`.

    Call it inside ``c4a.run(...)`` (or an integration's run), from agent code or from a tool.
    Raised inside a tool, the tool's own action is recorded as failed (it did not act).
    """

    if not reason or not reason.strip():
        raise ConfigurationError("escalate needs a reason: why a person must take over")
    run = current_run()
    run_id = run_id or (run.run_id if run else None)
    if run_id is None:
        raise ConfigurationError(
            'c4a.escalate() needs a run: call it inside `with c4a.run("<id>")` or pass run_id='
        )
    ledger = ledger or (run.ledger if run and run.run_id == run_id else None) or default_ledger()
    remains = [what_remains] if isinstance(what_remains, str) else list(what_remains)
    record_status(
        ledger,
        run_id,
        ESCALATED,
        reason,
        "escalation",
        {"reason": reason, "blocking_fact": blocking_fact, "what_remains": remains},
    )
    # Escalating from inside a tool: that tool hands over instead of acting, and the engine
    # records it as failed once Escalated leaves it, so list it as such already.
    inside = _effect.get()
    found = handoff(ledger, run_id, escalating=inside.key if inside else None)
    assert found is not None  # just recorded
    raise Escalated(found)


# What ``escalate_on=`` understands: the outcomes after which a person, not the model, decides.
ESCALATE_ON = ("denied", "in_doubt", "budget")


def check_escalate_on(value: object, where: str | None = None) -> tuple[str, ...]:
    """``value`` as a tuple of known outcomes; a lone string is taken as one outcome."""
    chosen = (value,) if isinstance(value, str) else tuple(value)  # type: ignore[arg-type]
    if unknown := sorted(set(chosen) - set(ESCALATE_ON)):
        raise ConfigurationError(
            f"escalate_on={unknown} is not understood{f' (in {where})' if where else ''}: "
            f"use any of {', '.join(map(repr, ESCALATE_ON))}"
        )
    return chosen


def escalate_by_policy(
    exc: BaseException,
    policy: Collection[str],
    *,
    action: Action | None = None,
    ledger: LedgerCore | None = None,
) -> None:
    """Escalate the run when ``exc`` is an outcome ``policy`` (``escalate_on``) names.

    Raises :class:`Escalated` (chained to ``exc``) when it applies, else returns and the caller
    re-raises ``exc``. A denied approval, an action in doubt or a budget cut then ends the run
    with a hand-off instead of going back to the model as a tool error. ``action`` is the call
    that met the outcome; without one (a model request refused by the budget) the run is the
    budget's.
    """
    from call4agents.model.errors import ApprovalDenied, EffectInDoubt

    if not policy or not isinstance(exc, Exception) or isinstance(exc, Escalated):
        return  # cancellation and interrupts stop here; an escalation is escalated already
    tool = action.tool if action else getattr(exc, "tool", "a step")
    call = f"{tool} {action.args_display}" if action else tool
    if "denied" in policy and isinstance(exc, ApprovalDenied):
        reason, fact = f"a person denied {tool}", exc.reason
        remains = [f"decide with the requester what to do instead of: {call}"]
    elif "in_doubt" in policy and (
        isinstance(exc, EffectInDoubt)
        or (action is not None and is_in_doubt_error(exc, action.options))
    ):
        reason = f"{tool} may or may not have happened"
        fact = f"{type(exc).__name__}: {exc}"[:500]
        remains = [
            f"check with the provider whether this happened, then settle it with "
            f"`call4agents resolve`: {call}"
        ]
    elif "budget" in policy and isinstance(exc, BudgetExceeded):
        reason, fact = f"the run hit its {exc.reason.replace('_', ' ')}", exc.detail
        remains = [call]
    else:
        return
    run_id = action.run_id if action else getattr(exc, "run_id", None)
    try:
        escalate(
            reason,
            what_remains=remains,
            blocking_fact=fact,
            run_id=run_id,
            ledger=action.ledger if action else ledger,
        )
    except Escalated as escalated:
        raise escalated from exc


def handoff(ledger: LedgerCore, run_id: str, *, escalating: str | None = None) -> Handoff | None:
    """The hand-off of an escalated run, with its actions as they stand now; None otherwise."""
    status = run_status(ledger, run_id)
    if status is None or "escalation" not in status.details:
        return None
    given = status.details["escalation"]
    ledger.sweep()  # a dead worker's action is in doubt, not "running"
    done, doubt, failed = _sort_actions(ledger.effects(run_id), escalating, given["reason"])
    return Handoff(
        run_id=run_id,
        reason=given["reason"],
        blocking_fact=given.get("blocking_fact"),
        what_remains=list(given.get("what_remains") or []),
        done=done,
        in_doubt=doubt,
        failed=failed,
        escalated_at=status.created_at,
    )


def _sort_actions(
    records: Sequence[EffectRecord], escalating: str | None, reason: str
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    done, doubt, failed = [], [], []
    for r in records:
        base = {"tool": r.tool, "args": r.args, "key": r.key, "attempt": r.attempt}
        if r.key == escalating and r.state == "started":
            failed.append({**base, "why": f"Escalated: {reason} (it did not act)"})
        elif r.state == "succeeded":
            # The tool's own value, not a framework's envelope of it (a LangGraph ToolMessage).
            result = observe.tool_payload(r.result) if r.pruned_at is None else None
            done.append({**base, "result": result, "external_ids": external_ids(result)})
        elif r.state in ("in_doubt", "started"):
            why = r.error or r.note or ("still running" if r.state == "started" else "")
            doubt.append({**base, "state": r.state, "why": why})
        else:
            failed.append({**base, "why": r.error or r.note or ""})
    return done, doubt, failed


def external_ids(result: Any) -> dict[str, Any]:
    """Ids a tool reported in its result: ``id``, ``external_id`` and ``*_id`` fields of a dict."""
    result = observe.tool_payload(result)
    if not isinstance(result, Mapping):
        return {}
    return {
        str(k): v
        for k, v in result.items()
        if isinstance(k, str)
        and (k in _ID_FIELDS or k.endswith("_id"))
        and isinstance(v, (str, int))
        and not isinstance(v, bool)  # a flag such as {"is_id": true} is not an id
    }


# -- budgets ----------------------------------------------------------------------------------

STEP_LIMIT = "step_limit"
BUDGET = "budget"
DEADLINE = "deadline"
_CALLS = "tool_calls"
_REQUESTS = "model_requests"
_COST = "cost"
_TOKENS_IN = "input_tokens"
_TOKENS_OUT = "output_tokens"
_STARTED = "started_at"


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


class BudgetExceeded(Call4AgentsError):
    """The run hit a limit of its :class:`Budget`; the call was not run.

    ``reason`` is ``"step_limit"`` (tool calls in all or per tool, or model requests),
    ``"budget"`` (the cost ceiling) or ``"deadline"``; it is also recorded as the run's ending
    (``ledger.run_status(run_id)``, ``call4agents show RUN``). Integrations let it end the
    agent's run rather than show it to the model: the hard cut is not a tool error to work around.
    """

    def __init__(self, *, run_id: str, tool: str, reason: str, detail: str) -> None:
        self.run_id = run_id
        self.tool = tool
        self.reason = reason
        self.detail = detail
        super().__init__(
            f"{tool} was not run: run {run_id!r} hit its {reason.replace('_', ' ')} ({detail}). "
            "Wrap up the run, or start it again with a larger budget."
        )


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


def _counters(conn: Connection, run_id: str) -> dict[str, float]:
    rows = conn.execute(
        select(run_counters.c.name, run_counters.c.value).where(run_counters.c.run_id == run_id)
    ).all()
    return {name: float(value) for name, value in rows}


def budget_usage(run_id: str | None = None, *, ledger: LedgerCore | None = None) -> BudgetUsage:
    """The current run's budget and what it spent; for the agent's "wrap up soon" prompt."""
    budget, counted, ledger = _current_budget("budget_usage()", ledger)
    wanted = run_id or counted
    outer = [] if wanted != counted else [b for b in _distinct(_chain()) if b[0] != counted]
    with ledger.store.read() as conn:
        values = {name: _counters(conn, name) for name in [wanted, *(r for r, _ in outer)]}
        now = float(conn.execute(select(now_sql(ledger.store.dialect))).scalar_one())
    enclosing = tuple(_usage(r, values[r], now, b) for r, b in outer)
    return replace(_usage(wanted, values[wanted], now, budget), enclosing=enclosing)


def _chain() -> tuple[tuple[str, Budget], ...]:
    run = current_run()
    return run.budgets if run is not None else ()


def spending_text(ledger: LedgerCore, run_id: str) -> str | None:
    """What a run's budget counted, in one line for ``call4agents show``; None if nothing."""
    with ledger.store.read() as conn:
        # Names under "run." are the run's own record (run_notes), not what a budget counted.
        values = {k: v for k, v in _counters(conn, run_id).items() if not k.startswith("run.")}
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
    if values.get(_COST):
        parts.append(f"cost {values[_COST]:.4g}")
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
        cost=values.get(_COST, 0.0),
        input_tokens=int(values.get(_TOKENS_IN, 0)),
        output_tokens=int(values.get(_TOKENS_OUT, 0)),
    )


def budget_gate(action: Action, inner: Gate | None) -> Gate | None:
    """The claim's gate with the run's budgets in front: checked and counted in the claim's own
    transaction, so two workers cannot both take the last call, and a crash cannot lose a count.

    Every budget in force is checked (a nested run's own and each enclosing run's), and the
    call is counted once in each of their runs' counters.
    """
    run = current_run()
    if run is None or not run.budgets:
        return inner
    chain = run.budgets
    if action.run_id != run.run_id and action.run_id not in {r for r, _ in chain}:
        return inner  # an action of another run, keyed explicitly: not these budgets'
    dialect = action.ledger.store.dialect

    def gate(conn: Connection, attempt: int) -> Call4AgentsError | None:
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
                _add(conn, dialect, counted, {_CALLS: 1, f"tool:{action.tool}": 1})
        return refusal

    return gate


def _lock_all(
    conn: Connection, dialect: str, chain: Sequence[tuple[str, Budget]]
) -> dict[str, tuple[dict[str, float], float]]:
    """Each budgeted run's counters under its lock, taken in run-id order: two workers whose
    runs nest the same runs differently still take the locks in one order, so never deadlock."""
    return {r: _locked_counters(conn, dialect, r) for r in sorted({r for r, _ in chain})}


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
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        try:
            _write_start(ledger, run_id)
        except LedgerError as exc:
            _not_started(exc)
        return
    loop.run_in_executor(None, _write_start, ledger, run_id).add_done_callback(_log_failure)


def _write_start(ledger: LedgerCore, run_id: str) -> None:
    with ledger.store.tx() as conn:
        _insert_start(conn, ledger.store.dialect, run_id)
    seen = _clock_started.setdefault(ledger, set())
    if len(seen) >= _CLOCKS_KEPT:
        seen.clear()  # forgetting only costs one more write that changes nothing
    seen.add(run_id)


def _log_failure(done: asyncio.Future[None]) -> None:
    if not done.cancelled() and done.exception() is not None:
        _not_started(done.exception())


def _not_started(exc: BaseException | None) -> None:
    # Not lost: the run's first counted step records the start in its claim instead, so a
    # database fault surfaces there (or at the first effect), never on entering the run.
    log.warning("could not record a run's start yet: %s", exc)


# The runs whose clock this process has started, by ledger: entering them again writes nothing.
_clock_started: weakref.WeakKeyDictionary[LedgerCore, set[str]] = weakref.WeakKeyDictionary()
_CLOCKS_KEPT = 10_000


def _insert_start(conn: Connection, dialect: str, run_id: str) -> None:
    insert = dialect_insert(dialect)
    conn.execute(
        insert(run_counters)
        .values(run_id=run_id, name=_STARTED, value=now_sql(dialect))
        .on_conflict_do_nothing(index_elements=["run_id", "name"])
    )


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
                _add(conn, dialect, name, {_REQUESTS: 1})
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
            _add(
                conn,
                ledger.store.dialect,
                name,
                {_TOKENS_IN: input_tokens, _TOKENS_OUT: output_tokens, _COST: spent},
            )


def _distinct(chain: Sequence[tuple[str, Budget]]) -> list[tuple[str, Budget]]:
    """One budget per counted run (the innermost given for it), so nothing is counted twice."""
    return list({name: budget for name, budget in chain}.items())


def _locked_counters(conn: Connection, dialect: str, run_id: str) -> tuple[dict[str, float], float]:
    """The run's counters under its lock, and the seconds since its clock started."""
    now = now_sql(dialect)
    # Entering the run started the clock (start_clock); this only covers a run entered before
    # any ledger was open, and makes sure the lock row below exists.
    _insert_start(conn, dialect, run_id)
    if dialect == "postgresql":
        # The started_at row is the run's lock: every counting step takes it first. Locking the
        # whole row set instead is not enough: a statement that waited on a lock still sees the
        # rows as they were when it began, so a counter row the previous holder created would
        # be missed and two workers could both take the last call. The read below is a new
        # statement, so it sees everything the previous holder committed.
        conn.execute(
            select(run_counters.c.value)
            .where(run_counters.c.run_id == run_id, run_counters.c.name == _STARTED)
            .with_for_update()
        )
    stmt = select(run_counters.c.name, run_counters.c.value).where(run_counters.c.run_id == run_id)
    values = {name: float(value) for name, value in conn.execute(stmt).all()}
    return values, float(conn.execute(select(now)).scalar_one()) - values[_STARTED]


def _over_budget(
    values: Mapping[str, float], elapsed: float, budget: Budget
) -> dict[str, str] | None:
    """The limits every step shares: the deadline and the cost ceiling."""
    deadline = budget.deadline_seconds
    if deadline is not None and elapsed >= deadline:
        return {"reason": DEADLINE, "detail": f"{deadline:g}s after the run started"}
    if budget.max_cost is not None and values.get(_COST, 0.0) >= budget.max_cost:
        spent = values.get(_COST, 0.0)
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


def _record_refusal(conn: Connection, dialect: str, refusal: BudgetExceeded) -> None:
    data = {"reason": refusal.reason, "tool": refusal.tool, "detail": refusal.detail}
    record_status_in(conn, dialect, refusal.run_id, refusal.reason, refusal.detail, "budget", data)


def _add(conn: Connection, dialect: str, run_id: str, amounts: Mapping[str, float]) -> None:
    insert = dialect_insert(dialect)
    for name, amount in amounts.items():
        conn.execute(
            insert(run_counters)
            .values(run_id=run_id, name=name, value=0.0)
            .on_conflict_do_nothing(index_elements=["run_id", "name"])
        )
        conn.execute(
            update(run_counters)
            .where(run_counters.c.run_id == run_id, run_counters.c.name == name)
            .values(value=run_counters.c.value + amount)
        )
