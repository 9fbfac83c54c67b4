"""Once-only execution: the engine every effect and every integration runs tools through.

One call goes: canonical arguments -> action key -> finished result in this process? return it ->
claim the action in the ledger (intent durable, lease held) -> run the tool -> record the outcome.
An action met in another state is returned (succeeded), waited for (live lease), or settled by the
rules for doubt: a ``check=`` reconciler, ``retry_in_doubt=True``, or else ``EffectInDoubt``.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import inspect
import json
import os
import sys
import types
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, Literal, ParamSpec, TypeVar, cast, overload

from . import _keys, _owner, _waiting, observe
from .approvals import ApprovalRequest, Gate, needs_approval
from .canonical import (
    CanonicalArgs,
    canonical_args,
    canonical_json,
    parse_paths,
    scrub,
    storable,
)
from .codec import ResultEncodingError, decode_result, encode_result
from .context import EffectContext, _effect, current_run
from .errors import (
    ConfigurationError,
    EffectInDoubt,
    LedgerError,
    OutcomeUnknown,
    ResultNotStored,
    ResultPruned,
)
from .ledger import Ledger, idempotency_key
from .lookup import afinder_first, check_from_finder, finder_first
from .run_notes import note_tool
from .runs import budget_gate, check_escalate_on, escalate_by_policy
from .store import Row
from .undo import register_undo

P = ParamSpec("P")
T = TypeVar("T")
Kind = Literal["none", "read", "write", "irreversible"]
KINDS: tuple[str, ...] = ("none", "read", "write", "irreversible")

# Errors after which the outside world may or may not have acted. Everything else that derives
# from Exception means the tool did not act; BaseExceptions (cancellation, KeyboardInterrupt,
# SystemExit) stop a tool half-way, so they mean in doubt too.
IN_DOUBT_ERRORS: tuple[type[BaseException], ...] = (
    TimeoutError,
    asyncio.TimeoutError,
    OutcomeUnknown,
    EffectInDoubt,
)


@dataclass(frozen=True)
class Happened:
    """A reconciler's answer: the action did happen, and this is its result."""

    result: Any = None


@dataclass(frozen=True)
class DidNotHappen:
    """A reconciler's answer: the action did not happen; it may run as a new attempt."""


@dataclass(frozen=True)
class EffectOptions:
    """How one tool is made once-only. Every integration accepts these per tool."""

    name: str | None = None
    kind: Kind = "write"
    key: Callable[..., Any] | None = None
    ignore: tuple[str, ...] = ()
    redact: tuple[str, ...] = ()
    scope: Literal["args", "call"] = "args"
    retry_in_doubt: bool = False
    check: Callable[..., Any] | None = None
    in_doubt_on: tuple[type[BaseException], ...] = ()
    wait: float | None = None
    lease: float | None = None
    ledger: Ledger | None = None
    approval: bool | Callable[..., bool] | None = None
    approval_ttl: float | None = None
    max_per_run: int | None = None
    credentials: Mapping[str, str | Callable[[], str]] = field(default_factory=dict)
    undo: Callable[..., Any] | None = None
    find_existing: Callable[..., Any] | None = None
    escalate_on: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ConfigurationError(f"kind={self.kind!r} is not one of {', '.join(KINDS)}")
        object.__setattr__(self, "escalate_on", check_escalate_on(self.escalate_on))
        if self.scope not in ("args", "call"):
            raise ConfigurationError(f"scope={self.scope!r} must be 'args' or 'call'")
        for name in ("ignore", "redact"):
            value = getattr(self, name)
            if isinstance(value, str):  # a lone string is a classic slip: ("a") is not a tuple
                object.__setattr__(self, name, (value,))
            parse_paths(getattr(self, name))
        if self.max_per_run is not None and self.max_per_run < 1:
            raise ConfigurationError("max_per_run must be at least 1")
        if self.find_existing is not None and self.check is None:
            # What the finder finds also settles a crash between creating and recording.
            object.__setattr__(self, "check", check_from_finder(self.find_existing))
        if (
            self.kind == "irreversible"
            and self.ledger is not None
            and self.ledger.durability == "process"
        ):
            raise _process_irreversible(self.name or "this tool")
        if self.undo is not None and self.name is not None:
            register_undo(self.name, self.undo)  # integrations name their tools here

    @property
    def recorded(self) -> bool:
        """Tools that only read run straight through: there is nothing to do once."""
        return self.kind in ("write", "irreversible")


# -- the ledger in use -------------------------------------------------------------------------

_default_ledger: Ledger | None = None


def init(
    url: str | Ledger | None = None,
    *,
    otel: bool | None = None,
    otel_record_args: bool = False,
    **settings: Any,
) -> Ledger:
    """Open the ledger effects use by default: ``sqlite:///.c4a/ledger.db`` or ``$CALL4AGENTS_URL``.

    Takes the settings of :class:`Ledger`, or an open ``Ledger``. Calling it again replaces the
    default ledger. ``otel``: OpenTelemetry spans and metrics on (True), off (False), or on when
    it is installed (None); ``otel_record_args=True`` also puts arguments and results on spans.
    """
    global _default_ledger
    if otel is not None or otel_record_args:
        observe.configure(otel, record_args=otel_record_args)
    ledger = url if isinstance(url, Ledger) else Ledger(url, **settings)
    _default_ledger = ledger
    return ledger


def default_ledger() -> Ledger:
    if _default_ledger is None:
        raise ConfigurationError(
            "no ledger is open: call c4a.init() once at start-up (or pass ledger= to the run or "
            "the effect)"
        )
    return _default_ledger


# -- one action, prepared --------------------------------------------------------------------


@dataclass
class Action:
    """Everything known about one call before it runs."""

    ledger: Ledger
    tool: str
    options: EffectOptions
    arguments: Mapping[str, Any]
    run_id: str
    call_id: str | None
    key: str
    args_display: str
    secrets: tuple[str, ...] = field(default=())
    needs_approval: bool = False
    args_material: str = ""  # the arguments' canonical key material (redacted values as HMACs)

    def context(self, attempt: int) -> EffectContext:
        return EffectContext(
            self.run_id, self.tool, self.key, idempotency_key(self.key), attempt, self.call_id
        )

    @property
    def args_digest(self) -> str:
        """What the ledger keeps of exactly these arguments: a caller's own key reused with other
        arguments is told apart by it, even where they differ only in a redacted value."""
        return hashlib.sha256(self.args_material.encode()).hexdigest()

    def same_args(self, digest: str | None, shown: Mapping[str, Any]) -> bool:
        """Whether a record (an action row, an approval ticket) is of exactly these arguments:
        by its digest, or, on one written before schema version 5, by the arguments as shown
        (where a redacted value is masked)."""
        if digest is not None:
            return digest == self.args_digest
        return bool(dict(shown) == json.loads(self.args_display))

    @property
    def ttl(self) -> float:
        return self.options.lease or self.ledger.lease

    def error_text(self, exc: BaseException) -> str:
        """What the ledger keeps of a tool's error: credentials masked, storable, at most 2,000
        characters (a text that cannot be written would leave a definite failure in doubt)."""
        try:
            message = str(exc)
        except Exception:  # noqa: BLE001 - an error whose __str__ fails still failed
            message = "(its message could not be read)"
        return storable(scrub(f"{type(exc).__name__}: {message}", self.secrets), 2000)


def action_key(run_id: str, tool: str, call_id: str | None, material: str) -> str:
    # Length-prefixed parts, so no run id or tool name can be crafted to collide with another.
    # One f-string (every call builds it): "c4a/1|" then "len:part" for each part, "|" between.
    call = call_id or ""
    text = (
        f"c4a/1|{len(run_id)}:{run_id}|{len(tool)}:{tool}|{len(call)}:{call}"
        f"|{len(material)}:{material}"
    )
    return hashlib.sha256(text.encode()).hexdigest()


def prepare(
    tool: str,
    arguments: Mapping[str, Any],
    options: EffectOptions,
    *,
    run_id: str | None = None,
    call_id: str | None = None,
    ledger: Ledger | None = None,
) -> Action:
    """Canonicalise and key one call; raises before anything is written if that cannot be done."""
    run = current_run()
    if run_id is None:
        if run is None:
            raise ConfigurationError(
                f"{tool} was called outside a run, so there is no stable id to make it once-only:"
                ' wrap the agent in `with c4a.run("<id that survives a resume>"):`'
            )
        run_id = run.run_id
    if call_id is None and run is not None and run.run_id == run_id:
        call_id = run.call_id
    ledger = ledger or options.ledger or (run.ledger if run else None) or default_ledger()
    if options.kind == "irreversible" and ledger.durability == "process":
        raise _process_irreversible(tool)
    if options.scope == "call" and not call_id:
        raise ConfigurationError(
            f"{tool} is scope='call' but no call id is known: run it through an integration, or "
            'inside `with c4a.tool_call("<stable call id>"):`'
        )
    scoped = call_id if options.scope == "call" else None
    memo = None
    if options.key is None and not options.ignore and not options.redact:
        memo = _keys.memo_of(tool, run_id, scoped, arguments)  # see _keys: a repeat's key
    kept = _keys.recall(memo)
    if kept is not None:
        key, canon = kept
        _check_size(tool, canon.display, ledger.max_args_bytes)  # each ledger has its limit
    else:
        canon = _canonicalise(tool, arguments, options, ledger)
        _check_size(tool, canon.display, ledger.max_args_bytes)
        material = canon.key_material
        if options.key is not None:
            material = _named_key(tool, options.key(**arguments), options, ledger)
        key = action_key(run_id, tool, scoped, material)
        _keys.keep(memo, key, canon)
    approval = needs_approval(options.approval, arguments, options.kind, ledger.approval_for)
    return Action(
        ledger,
        tool,
        options,
        arguments,
        run_id,
        call_id,
        key,
        canon.display,
        canon.secrets,
        approval,
        canon.key_material,
    )


def _check_size(tool: str, display: str, limit: int) -> None:
    # Each action's arguments are written with its intent and read back by every repeat, doubt
    # list and approval page: a 50 MB argument would be all of those, 50 MB at a time.
    if len(display) > limit // 4 and len(display.encode()) > limit:
        raise ConfigurationError(
            f"{tool}: the arguments take {len(display.encode()):,} bytes as canonical JSON, over "
            f"the ledger's max_args_bytes ({limit:,}); nothing was written or run. Pass a "
            "reference (a file path, an object id) instead of the content, or raise "
            "max_args_bytes on the Ledger"
        )


def _named_key(tool: str, named: object, options: EffectOptions, ledger: Ledger) -> str:
    """The key material of ``key=``. Under ``redact=`` the callable may have used a redacted
    value, and the idempotency key travels to providers, spans and the CLI: a plain hash of a
    low-entropy value (a PIN) is reversed by trying them all, so it goes through the ledger's
    salted HMAC, as a redacted argument does. Without ``redact=`` it is as it always was."""
    text = canonical_json(tool, named)
    if options.redact:
        return "key-hmac:" + ledger.digest(text.encode())
    return "key:" + text


def _process_irreversible(tool: str) -> ConfigurationError:
    return ConfigurationError(
        f"{tool} is kind='irreversible' but its ledger is durability='process', whose commits a "
        "crash of the database server or the machine can lose (the intent, or the result: the "
        "action could run again); open the ledger with durability='power' (the default) for it;"
        " nothing was run"
    )


def _canonicalise(
    tool: str, arguments: Mapping[str, Any], options: EffectOptions, ledger: Ledger
) -> CanonicalArgs:
    digest = (lambda data: ledger.digest(data)) if options.redact else None
    return canonical_args(
        tool, arguments, ignore=options.ignore, redact=options.redact, redact_digest=digest
    )


# -- steps shared by the sync and async drivers ------------------------------------------------


@dataclass(frozen=True)
class _Go:
    attempt: int
    owner: str  # the claim's owner text: its lease is renewed under it


@dataclass(frozen=True)
class _Found:
    row: Row


class _Recalled:
    """A likely repeat answered by one plain read: its recorded result, decoded."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


_AGAIN = object()
_MISS = object()


def cached(action: Action) -> Any:
    found = action.ledger._cache.get(action.key)
    if found is None:
        return _MISS
    action.ledger.dedup.add(action.tool)
    return decode_result(found)


def begin(
    action: Action, *, wait: bool = True, owner: str | None = None
) -> _Go | _Found | _Recalled:
    """Claim the action, or wait on a live owner; returns what to do next.

    ``wait=False`` returns a live owner's row at once, for callers that wait elsewhere (the
    async path waits on the event loop, so waiters never fill the default thread pool).
    ``owner``: the claim's owner text, when the caller made it (see ``_in_thread``).
    """
    ledger = action.ledger
    looked = ledger._likely_repeat(action.run_id)
    if looked:  # a run met here for the first time, or resumed: its result may be recorded
        text = ledger.store.recorded(action.key)
        if text is not None:  # a repeat needs no claim, gate or new yes: nothing will run
            ledger._recall_run(action.run_id)  # a resume: its next repeats are near
            ledger.dedup.add(action.tool)
            ledger._remember(action.key, text)
            if owner is not None:
                _owner.finished(owner)
            return _Recalled(decode_result(text))
    return _owning(owner, lambda mine: _claim(action, mine, looked=looked, wait=wait))


def _owning(owner: str | None, claim: Callable[[str], T]) -> T:
    """``claim(owner)`` under a claim's owner text (a new one if None); unless it returns the
    go-ahead to run, no tool runs under that owner, and its process says so (_owner)."""
    owner = owner or _owner.claim_owner()
    step: Any = None
    try:
        step = claim(owner)
        return cast(T, step)
    finally:
        if not isinstance(step, _Go):
            _owner.finished(owner)


def _claim(action: Action, owner: str, *, looked: bool, wait: bool) -> _Go | _Found:
    ledger = action.ledger
    gate = budget_gate(action, _gate(action))
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
                read_first=not looked,
            )
        except LedgerError:
            # The intent may have committed with its answer lost: kept, so that a retry of this
            # process knows the intent as its own (and that nothing ran) and goes on.
            _owner.unanswered(action.key, owner)
            raise
        if claim.outcome == "run":
            ledger._wrote_intent(action.run_id)
            return _Go(claim.attempt, owner)
        if claim.refusal is not None:
            raise claim.refusal
        row = claim.row
        if row is not None:
            if row.state == "started" and _adopted(action, row, owner):
                ledger._wrote_intent(action.run_id)
                return _Go(row.attempt, owner)
            if row.state == "succeeded":
                ledger._recall_run(action.run_id)  # a resume: its next repeats are near
            return _Found(_wait_while_live(action, row) if wait else row)


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


def _gate(action: Action) -> Gate | None:
    options = action.options
    if not action.needs_approval and options.max_per_run is None:
        return None
    ttl = options.approval_ttl or action.ledger.approval_ttl
    return Gate(action.ledger, action, action.needs_approval, options.max_per_run, ttl)


def _wait_while_live(action: Action, row: Row) -> Row:
    """Wait (bounded) while another live worker runs the action; a dead one's lease is doubt.

    Woken by the outcome on PostgreSQL, polling otherwise: see _waiting (which also has the
    async form, ``await_while_live``).
    """
    return _waiting.wait_while_live(action, row)


def settle_found(action: Action, row: Row) -> Any:
    """A row that is not ours to run: its result, a retry marker, or an error."""
    if row.state == "succeeded":
        action.ledger.dedup.add(action.tool)  # done before: not run again
        return _recorded_result(action, row)
    if row.state == "failed" or row.state == "started":
        return _AGAIN  # failed: claim takes it as a new attempt; started: lost a race, look again
    return _Doubt(row)


@dataclass(frozen=True)
class _Doubt:
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
    action.ledger._remember(action.key, row.result)
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
    """Record a reconciler's answer. Returns the result, _AGAIN to run anew, or None (unknown)."""
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
        return settle_found(action, fresh) if fresh else _AGAIN
    if isinstance(verdict, DidNotHappen):
        store.resolve(
            action.key,
            happened=False,
            result=None,
            by="check",
            note="check= found it did not happen",
            expect_attempt=row.attempt,
        )
        return _AGAIN
    if verdict is not None:
        raise ConfigurationError(
            f"check= for {action.tool} returned {type(verdict).__name__}: return "
            "c4a.Happened(result), c4a.DidNotHappen() or None when it cannot tell"
        )
    return None


def is_in_doubt_error(exc: BaseException, options: EffectOptions) -> bool:
    if not isinstance(exc, Exception):
        return True
    return isinstance(exc, (IN_DOUBT_ERRORS, options.in_doubt_on))


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
        ledger._remember(action.key, encoded)
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
    if hit is not _MISS:
        return cast(T, hit)
    call = finder_first(action, call)
    while True:
        step = begin(action)
        if isinstance(step, _Recalled):
            return cast(T, step.value)
        if isinstance(step, _Go):
            return _execute(action, step, call)
        outcome = settle_found(action, step.row)
        if isinstance(outcome, _Doubt):
            outcome = _on_doubt(action, outcome.row)
            if isinstance(outcome, _Go):
                return _execute(action, outcome, call)
        if outcome is not _AGAIN:
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
    return _take_over_or_raise(action, row)


def _take_over_or_raise(action: Action, row: Row, owner: str | None = None) -> Any:
    return _owning(owner, lambda mine: _take_over(action, row, mine))


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
    return _Go(attempt, owner) if attempt is not None else _AGAIN


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


def _execute(action: Action, go: _Go, call: Callable[[], T]) -> T:
    heartbeat, attempt = action.ledger._heartbeat, go.attempt
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
    if hit is not _MISS:
        return cast(T, hit)
    call = afinder_first(action, call)
    while True:
        step = await _in_thread(lambda owner: begin(action, wait=False, owner=owner))
        if isinstance(step, _Recalled):
            return cast(T, step.value)
        if isinstance(step, _Go):
            return await _aexecute(action, step, call)
        row = await _waiting.await_while_live(action, step.row)
        outcome = settle_found(action, row)
        if isinstance(outcome, _Doubt):
            outcome = await _aon_doubt(action, outcome.row)
            if isinstance(outcome, _Go):
                return await _aexecute(action, outcome, call)
        if outcome is not _AGAIN:
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
    return await _in_thread(lambda owner: _take_over_or_raise(action, row, owner))


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


async def _aexecute(action: Action, go: _Go, call: Callable[[], Awaitable[T]]) -> T:
    heartbeat, attempt = action.ledger._heartbeat, go.attempt
    heartbeat.hold(action.key, attempt, action.ttl, go.owner)
    token = _effect.set(action.context(attempt))
    try:
        try:
            result = await call()
        except BaseException as exc:
            _effect.reset(token)
            # Cancellation must still leave a durable "in doubt", so shield the write from it.
            try:
                await asyncio.shield(asyncio.to_thread(record_error, action, attempt, exc))
            except LedgerError as lost:
                if isinstance(exc, Exception):  # never turn a cancellation into an error
                    raise _unrecorded(action, attempt, lost) from exc
            raise
        _effect.reset(token)
        try:
            return cast(T, await asyncio.to_thread(record_result, action, attempt, result))
        except LedgerError as lost:
            raise _unrecorded(action, attempt, lost) from lost
    finally:
        heartbeat.release(action.key)  # after the outcome is written, as in _execute
        _owner.finished(go.owner)


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
    found = {name: value for (name, _), value in zip(params, args, strict=False)}
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
        run = current_run()
        if run is not None:  # counted for the run's summary (a read is its evidence)
            note_tool(run.run_id, options.kind)
        if not options.recorded:
            return cast(T, fn(*args, **kwargs, **injected))
        action = prepare(self.tool, arguments, options)
        if injected:
            action.secrets += tuple(v for v in injected.values() if len(v) >= 4)
        if self.is_async:
            return cast(T, aperform(action, lambda: fn(*args, **kwargs, **injected)))
        return perform(action, lambda: cast(T, fn(*args, **kwargs, **injected)))

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
    ledger: Ledger | None = None,
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
