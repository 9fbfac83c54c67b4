"""One action, prepared: a tool's options, the call's canonical arguments and its key."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal, ParamSpec, TypeVar

from call4agents.engine.endings import check_escalate_on
from call4agents.model.canonical import (
    CanonicalArgs,
    canonical_args,
    canonical_json,
    parse_paths,
    scrub,
    storable,
)
from call4agents.model.errors import (
    ConfigurationError,
)
from call4agents.model.kinds import KINDS as KINDS
from call4agents.model.kinds import Kind as Kind

from .context import EffectContext, _run
from .default import default_ledger
from .ledger_core import LedgerCore
from .lookup import check_from_finder
from .undos import register_undo

P = ParamSpec("P")
T = TypeVar("T")


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
    ledger: LedgerCore | None = None
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


# -- one action, prepared --------------------------------------------------------------------


@dataclass(slots=True)
class Action:
    """Everything known about one call before it runs."""

    ledger: LedgerCore
    tool: str
    options: EffectOptions
    arguments: Mapping[str, Any]
    run_id: str
    call_id: str | None
    key: str
    args_display: str
    ttl: float  # seconds of lease a claim takes: the tool's own, else the ledger's
    secrets: tuple[str, ...] = field(default=())
    needs_approval: bool = False
    args_material: str = ""  # the arguments' canonical key material (redacted values as HMACs)
    # False when call_id only names this one request (MCP's JSON-RPC id: a retry gets a new one,
    # and every connection counts from the start), so no approval is matched by it.
    call_id_stable: bool = True

    def context(self, attempt: int) -> EffectContext:
        return EffectContext(self.run_id, self.tool, self.key, attempt, self.call_id)

    @property
    def args_digest(self) -> str:
        """What the ledger keeps of exactly these arguments: a caller's own key reused with other
        arguments is told apart by it, even where they differ only in a redacted value."""
        return hashlib.sha256(self.args_material.encode()).hexdigest()

    def same_args(self, digest: str | None) -> bool:
        """Whether a record (an action row, an approval ticket) is of exactly these arguments, by
        its digest (None, a pruned action's, matches no arguments)."""
        return digest == self.args_digest

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
    ledger: LedgerCore | None = None,
) -> Action:
    """Canonicalise and key one call; raises before anything is written if that cannot be done."""
    run = _run.get()
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
        memo = _memo_of(tool, run_id, scoped, arguments)  # see _KEPT: a repeat's key
    kept = None if memo is None else _KEPT.get(memo)
    if kept is not None:
        key, canon = kept
        _check_size(tool, canon.display, ledger.max_args_bytes)  # each ledger has its limit
    else:
        digest = ledger.digest if options.redact else None
        canon = canonical_args(
            tool, arguments, ignore=options.ignore, redact=options.redact, redact_digest=digest
        )
        _check_size(tool, canon.display, ledger.max_args_bytes)
        material = canon.key_material
        if options.key is not None:
            material = _named_key(tool, options.key(**arguments), options, ledger)
        key = action_key(run_id, tool, scoped, material)
        _keep(memo, key, canon)
    rule = options.approval  # the tool's own rule, else the ledger's policy for its kind
    if rule is None:
        approval = options.kind in ledger.approval_for
    else:
        approval = bool(rule(**arguments)) if callable(rule) else bool(rule)
    return Action(
        ledger,
        tool,
        options,
        arguments,
        run_id,
        call_id,
        key,
        canon.display,
        options.lease or ledger.lease,
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


def _named_key(tool: str, named: object, options: EffectOptions, ledger: LedgerCore) -> str:
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


# -- keys of the plainest calls, remembered by value --------------------------------------------
#
# A call's key is the SHA-256 of its run, tool, call id and canonical arguments, and working it out
# (canonical JSON, then the hash) is a third of what a repeat served from memory costs. For a call
# whose arguments are all ``str``, ``int``, ``bool`` or ``None`` (exactly those types, no
# subclasses) the canonical arguments are a pure function of the names, the values and their
# types, so the key is kept here under exactly those, and the next equal call skips both steps.
# Types are part of what is compared because Python's ``True == 1`` is not JSON's.
#
# Only calls with no ``key=``, ``ignore=`` or ``redact=`` are kept (those involve the tool's code
# or the ledger's secret), only short ones (``_MAX_TEXT``), and at most ``_LIMIT`` of them: the
# memo is emptied when full, so its memory stays bounded in a worker that lives for millions of
# runs.

_PLAIN: Final[frozenset[type]] = frozenset((str, int, bool, type(None)))
_LIMIT: Final = 4096
_MAX_TEXT: Final = 1024  # characters of canonical arguments

Memo = tuple[Any, ...]

_KEPT: dict[Memo, tuple[str, CanonicalArgs]] = {}


def _memo_of(
    tool: str, run_id: str, call_id: str | None, arguments: Mapping[str, Any]
) -> Memo | None:
    """What a call is remembered by, or None if its arguments are not all of the plain types
    (then nothing user-defined is hashed or compared here either)."""
    values = tuple(arguments.values())
    types = tuple(map(type, values))
    if not _PLAIN.issuperset(types):
        return None
    return (tool, run_id, call_id, tuple(arguments), values, types)


def _keep(memo: Memo | None, key: str, canon: CanonicalArgs) -> None:
    if memo is None or len(canon.display) > _MAX_TEXT:
        return
    if len(_KEPT) >= _LIMIT:
        _KEPT.clear()  # one call, safe against other threads (popping the oldest is not)
    _KEPT[memo] = (key, canon)
