"""The steps of one action that the sync and async drivers share: claim, settle, record."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple, TypeVar, cast

from call4agents.engine.budgets import budget_gate
from call4agents.model.codec import ResultEncodingError, decode_result, encode_result
from call4agents.model.errors import (
    ConfigurationError,
    EffectInDoubt,
    LedgerError,
    ResultNotStored,
    ResultPruned,
)
from call4agents.storage.store import Gate as Claimable
from call4agents.storage.store import Row

from . import _owner, owner_wait
from .action import Action
from .approvals import Gate
from .context import _run
from .verdicts import DidNotHappen, Happened, is_in_doubt_error

T = TypeVar("T")


# -- steps shared by the sync and async drivers ------------------------------------------------


class Go(NamedTuple):  # made on every action: a named tuple costs a third of a dataclass
    attempt: int
    owner: str  # the claim's owner text: its lease is renewed under it


@dataclass(frozen=True)
class Found:
    row: Row


class Recalled:
    """A likely repeat answered by one plain read: its recorded result, decoded."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


AGAIN = object()
MISS = object()


def cached(action: Action) -> Any:
    found = action.ledger.recent.get(action.key)
    if found is None:
        return MISS
    action.ledger.dedup.add()
    return decode_result(found)


def begin(action: Action, *, wait: bool = True, owner: str | None = None) -> Go | Found | Recalled:
    """Claim the action, or wait on a live owner; returns what to do next.

    ``wait=False`` returns a live owner's row at once, for callers that wait elsewhere (the
    async path waits on the event loop, so waiters never fill the default thread pool).
    ``owner``: the claim's owner text, when the caller made it (see ``_in_thread``).
    """
    ledger = action.ledger
    # A run met here for the first time, or resumed: its result may be recorded.
    if ledger.recent.likely_repeat(action.run_id):
        text = ledger.store.recorded(action.key)
        if text is not None:  # a repeat needs no claim, gate or new yes: nothing will run
            ledger.recent.recall_run(action.run_id)  # a resume: its next repeats are near
            ledger.dedup.add()
            ledger.recent.remember(action.key, text)
            if owner is not None:
                _owner.finished(owner)
            return Recalled(decode_result(text))
    return owning(owner, _claim, action, wait)


def owning(owner: str | None, claim: Callable[..., T], *args: Any) -> T:
    """``claim(*args, owner)`` under a claim's owner text (a new one if None); unless it returns
    the go-ahead to run, no tool runs under that owner, and its process says so (_owner)."""
    owner = owner or _owner.claim_owner()
    step: Any = None
    try:
        step = claim(*args, owner)
        return cast(T, step)
    finally:
        if not isinstance(step, Go):
            _owner.finished(owner)


def _claim(action: Action, wait: bool, owner: str) -> Go | Found:
    ledger = action.ledger
    gated = action.needs_approval or action.options.max_per_run is not None
    gate: Claimable | None = _gate(action) if gated else None
    run = _run.get()
    if run is not None and run.budgets:
        gate = budget_gate(action, run, gate)
    digest = action.args_digest
    while True:
        try:
            claim = ledger.store.claim(
                key=action.key,
                run_id=action.run_id,
                tool=action.tool,
                kind=action.options.kind,
                args=action.args_display,
                owner=owner,
                ttl=action.ttl,
                args_digest=digest,
                gate=gate,
            )
        except LedgerError:
            # The intent may have committed with its answer lost: kept, so that a retry of this
            # process knows the intent as its own (and that nothing ran) and goes on.
            _owner.unanswered(action.key, owner)
            raise
        if claim.outcome == "run":
            ledger.recent.wrote_intent(action.run_id)
            return Go(claim.attempt, owner)
        if claim.refusal is not None:
            raise claim.refusal
        row = claim.row
        if row is not None:
            if row.state == "started" and _adopted(action, row, owner):
                ledger.recent.wrote_intent(action.run_id)
                return Go(row.attempt, owner)
            if row.state == "succeeded":
                ledger.recent.recall_run(action.run_id)  # a resume: its next repeats are near
            return Found(owner_wait.wait_while_live(action, row) if wait else row)


def _adopted(action: Action, row: Row, owner: str) -> bool:
    """Whether ``row`` is an intent this process wrote whose answer was lost, now ``owner``'s.

    Its owner text names one claim of this process, which never ran the tool (it got no
    answer); ``_owner.adopt`` hands it to one caller only, and moving the row to ``owner``
    under that owner text and attempt proves nobody moved the action on meanwhile."""
    lost = row.owner
    if lost is None or not _owner.adopt(action.key, lost):
        return False
    try:
        return action.ledger.store.adopt(action.key, row.attempt, lost, owner, action.ttl)
    except LedgerError:
        # Its answer may be lost too: the row names one of the two, and both stay adoptable.
        _owner.unanswered(action.key, owner)
        _owner.unanswered(action.key, lost)
        raise
    finally:
        _owner.finished(lost)


def _gate(action: Action) -> Gate:
    """The approval and per-run limit gate of an action that has either."""
    options = action.options
    ttl = options.approval_ttl or action.ledger.approval_ttl
    return Gate(action.ledger, action, action.needs_approval, options.max_per_run, ttl)


def settle_found(action: Action, row: Row) -> Any:
    """A row that is not ours to run: its result, a retry marker, or an error."""
    if row.state == "succeeded":
        action.ledger.dedup.add()  # done before: not run again
        return _recorded_result(action, row)
    if row.state == "failed" or row.state == "started":
        return AGAIN  # failed: claim takes it as a new attempt; started: lost a race, look again
    return Doubt(row)


@dataclass(frozen=True)
class Doubt:
    row: Row


def _recorded_result(action: Action, row: Row) -> Any:
    if row.pruned_at is not None:
        raise ResultPruned(key=action.key, run_id=action.run_id, tool=action.tool)
    if row.result is None:
        raise ResultNotStored(
            key=action.key,
            run_id=action.run_id,
            tool=action.tool,
            why=(row.note or "no result was recorded"),
        )
    action.ledger.recent.remember(action.key, row.result)
    return decode_result(row.result)


def in_doubt_error(action: Action, row: Row) -> EffectInDoubt:
    return EffectInDoubt(
        key=action.key,
        run_id=action.run_id,
        tool=action.tool,
        reason=row.note or row.error or "it was interrupted",
        attempt=row.attempt,
    )


def apply_verdict(action: Action, row: Row, verdict: Any) -> Any:
    """Record a reconciler's answer. Returns the result, AGAIN to run anew, or None (unknown)."""
    store = action.ledger.store
    if isinstance(verdict, Happened):
        try:
            encoded = encode_result(verdict.result, max_bytes=action.ledger.max_result_bytes)
        except ResultEncodingError as exc:
            raise ResultNotStored(
                key=action.key, run_id=action.run_id, tool=action.tool, why=str(exc)
            ) from exc
        store.resolve(
            action.key,
            happened=True,
            result=encoded,
            by="check",
            note="check= found it happened",
            expect_attempt=row.attempt,
        )
        fresh = store.get(action.key)
        return settle_found(action, fresh) if fresh else AGAIN
    if isinstance(verdict, DidNotHappen):
        store.resolve(
            action.key,
            happened=False,
            result=None,
            by="check",
            note="check= found it did not happen",
            expect_attempt=row.attempt,
        )
        return AGAIN
    if verdict is not None:
        raise ConfigurationError(
            f"check= for {action.tool} returned {type(verdict).__name__}: return "
            "c4a.Happened(result), c4a.DidNotHappen() or None when it cannot tell"
        )
    return None


def record_error(action: Action, attempt: int, exc: BaseException) -> None:
    state: Literal["failed", "in_doubt"] = (
        "in_doubt" if is_in_doubt_error(exc, action.options) else "failed"
    )
    # The error itself (e.g. "TimeoutError: read timed out") is the reason shown for a doubt.
    action.ledger.store.finish(action.key, attempt, state=state, error=action.error_text(exc))


def record_result(action: Action, attempt: int, result: Any) -> Any:
    """Store the result; if it cannot be stored the action is still recorded as done."""
    ledger = action.ledger
    try:
        encoded = encode_result(result, max_bytes=ledger.max_result_bytes)
    except ResultEncodingError as exc:
        ledger.store.finish(
            action.key, attempt, state="succeeded", result=None, note=f"result not stored: {exc}"
        )
        raise ResultNotStored(
            key=action.key, run_id=action.run_id, tool=action.tool, why=str(exc)
        ) from None
    if ledger.store.finish(action.key, attempt, state="succeeded", result=encoded):
        ledger.recent.remember(action.key, encoded)
        return result
    return _fenced_off(action, attempt)


def _fenced_off(action: Action, attempt: int) -> Any:
    """The ledger's answer for an attempt whose result came after the action moved on (its
    lease was taken over, or it was resolved): never this late result, which is kept as
    evidence and differs from what every other caller of the action is told."""
    row = action.ledger.store.get(action.key)
    if row is not None and row.state == "succeeded":
        return _recorded_result(action, row)
    raise EffectInDoubt(
        key=action.key,
        run_id=action.run_id,
        tool=action.tool,
        reason=f"attempt {attempt} returned after the action had moved on without it (its lease"
        " lapsed and it was taken over or resolved); its result is kept as evidence, not "
        "reported as the action's",
        attempt=row.attempt if row is not None else attempt,
    )
