"""How a run ended when a run control ended it: escalated to a person, undone, partly undone.

One row per such run in ``c4a_runs``. ``details`` is a JSON object with one section per control
(``"escalation"``, ``"undo"``), so undoing an escalated run keeps the escalation's hand-off.

Escalation is a legitimate ending, not a failure: ``c4a.escalate(...)`` records why the agent
stopped and what is left, then raises :class:`Escalated` for the caller to catch and hand on.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NoReturn

from call4agents.engine.context import _effect, current_run
from call4agents.engine.default import default_ledger
from call4agents.engine.verdicts import is_in_doubt_error
from call4agents.model.errors import BudgetExceeded, ConfigurationError
from call4agents.storage import run_controls
from call4agents.storage.store import Conn

from . import observe
from .observe import external_ids

log = logging.getLogger("call4agents")

if TYPE_CHECKING:
    from call4agents.engine.action import Action
    from call4agents.engine.ledger_core import LedgerCore
    from call4agents.engine.records import EffectRecord

ESCALATED = "escalated"
UNDONE = "undone"
PARTLY_UNDONE = "partly_undone"


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
        record_status_in(conn, run_id, status, reason, section, data)


def record_status_in(
    conn: Conn, run_id: str, status: str, reason: str | None, section: str, data: Any
) -> None:
    """``record_status`` inside a transaction the caller holds (the claim's, for budgets)."""
    run_controls.write_status(conn, run_id, status, reason, section, data)
    observe.telemetry().run_ended(run_id, status)


def run_status(ledger: LedgerCore, run_id: str) -> RunStatus | None:
    row = run_controls.status(ledger.store, run_id)
    return None if row is None else _status(row)


def run_endings(ledger: LedgerCore, status: str | None, *, limit: int) -> list[RunStatus]:
    return [_status(row) for row in run_controls.statuses(ledger.store, status, limit)]


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
    escalating = inside.key if inside is not None and inside.covered else None
    found = handoff(ledger, run_id, escalating=escalating)
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
        remains = [_settle_step(action.key if action else getattr(exc, "key", ""), call)]
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


def _settle_step(key: str, call: str) -> str:
    """What remains of a run escalated on an action in doubt: finding out, then settling it, in
    the console (its In doubt page, or the run's page, where it is settled in the browser) or
    from a shell."""
    command = f"`call4agents resolve {key[:12]} --happened` (or `--did-not-happen`)"
    return (
        "check with the provider whether this happened, then settle it in the console (In "
        f"doubt, or this run's page) or with {command if key else '`call4agents resolve`'}: "
        f"{call}"
    )


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
