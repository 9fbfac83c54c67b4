"""What integration packages build on: one framework tool call run through the ledger.

Each integration (LangGraph, Pydantic AI, the Agents SDK, MCP) finds the run id and the call id
in its framework's own objects, then calls :func:`run_tool` or :func:`arun_tool`. Outcomes that
are not a result (in doubt, in progress, denied, approval needed) are Call4AgentsErrors; turn them
into the framework's tool-error shape with :func:`message_for_model`.
"""

from __future__ import annotations

import functools
import json
import sys
import threading
import time
import warnings
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass, field, fields, replace
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, TypeVar

from .engine import observe, run_notes
from .engine.action import Action, EffectOptions, prepare
from .engine.approvals import ApprovalRequest, first_shown
from .engine.budgets import Budget, count_model_request, record_model_usage
from .engine.context import RunContext, Trigger, check_run_id, current_run, idempotency_key, soon
from .engine.context import uncovered as uncovered_call
from .engine.effect import aperform, perform
from .engine.endings import (
    ESCALATE_ON,
    Escalated,
    check_escalate_on,
    escalate_by_policy,
    handoff,
)
from .engine.ledger_core import LedgerCore
from .engine.lookup import when_done as when_done
from .engine.observe import (
    NOT_AN_ENVELOPE,
    Step,
    StepFigures,
    Watch,
    external_id,
    external_ids,
    outcome_of,
    register_tool_payload,
    register_tool_payload_shape,
)
from .engine.run_block import run_part
from .engine.run_notes import TRIGGERS, note_tool
from .engine.verdicts import Happened, is_in_doubt_error
from .facade.ledger import Ledger, default_ledger
from .model import _semconv as semconv  # every telemetry name, for spans an integration makes
from .model.canonical import canonical_args
from .model.errors import (
    ApprovalDenied,
    ApprovalRequired,
    BudgetExceeded,
    Call4AgentsError,
    ConfigurationError,
    EffectInDoubt,
    EffectInProgress,
    ResultNotStored,
    ResultPruned,
)
from .storage.store import Row

if TYPE_CHECKING:
    from .facade import _children as quickstart_children

T = TypeVar("T")

ToolOptions = Mapping[str, EffectOptions | Mapping[str, Any]]


def options_for(tool: str, per_tool: ToolOptions | None, default: EffectOptions) -> EffectOptions:
    """The options of one tool: the integration's default, overridden per tool name."""
    found = (per_tool or {}).get(tool)
    if found is None:
        return default if default.name else replace(default, name=tool)
    if isinstance(found, EffectOptions):
        return found if found.name else replace(found, name=tool)
    return replace(default, **{"name": tool, **dict(found)})


def with_escalate_on(options: EffectOptions, escalate_on: Collection[str]) -> EffectOptions:
    """``options`` with an integration's ``escalate_on`` added to the tool's own: the core
    escalates a denied, in-doubt or budget-cut call by policy where the action runs."""
    wanted = set(escalate_on) - set(options.escalate_on)
    if not wanted:
        return options
    return replace(options, escalate_on=(*options.escalate_on, *sorted(wanted)))


def action_for(
    tool: str,
    arguments: Mapping[str, Any],
    options: EffectOptions,
    *,
    run_id: str,
    call_id: str | None = None,
    ledger: Ledger | None = None,
) -> Action:
    """Key one tool call; raises UnstableArguments/ConfigurationError before anything runs."""
    return prepare(
        options.name or tool, arguments, options, run_id=run_id, call_id=call_id, ledger=ledger
    )


def run_tool(action: Action, call: Callable[[], T]) -> T:
    """Run a sync tool call once for ``action``; a repeat returns the recorded result."""
    note_tool(action.run_id, action.options.kind)
    return call() if not action.options.recorded else perform(action, call)


async def arun_tool(action: Action, call: Callable[[], Awaitable[T]]) -> T:
    """Run an async tool call once for ``action``; ledger I/O stays off the event loop."""
    note_tool(action.run_id, action.options.kind)
    return await call() if not action.options.recorded else await aperform(action, call)


def note_unrecorded(options: EffectOptions) -> None:
    """A tool call that skips the ledger (kind ``read`` or ``none``) was made in the current
    run: counted for the run's summary, where a ``read`` is the evidence behind a completion."""
    run = current_run()
    if run is not None:
        note_tool(run.run_id, options.kind)


def run_continues(
    run_id: str, *, ledger: LedgerCore | None = None, trigger: str | None = None
) -> None:
    """Open the run's notes unless they are open already: for a framework whose run has no
    hook at its start, only at each step (the first step in this process opens them). The
    look at the ledger for a retry goes to a worker thread inside a running event loop."""
    if run_notes.is_open(run_id):
        return
    notes = run_notes.enter(run_id, ledger, check_trigger(trigger), by_steps=True)
    if notes is not None:
        soon(run_notes.look_back, notes)


def run_finished(run_id: str, exc: BaseException | None = None) -> None:
    """The framework's run of ``run_id`` ended (``exc`` None: completed). Only a run opened by
    :func:`run_continues` is ended here; one inside the caller's ``c4a.run`` block ends with it."""
    notes = run_notes.leave_steps(run_id)
    if notes is not None:
        run_notes.finish(notes, exc)


async def arun_finished(run_id: str, exc: BaseException | None = None) -> None:
    """``run_finished`` with its ledger write off the event loop."""
    notes = run_notes.leave_steps(run_id)
    if notes is not None:
        await run_notes.afinish(notes, exc)


def step(run_id: str | None, index: int | None, span: object = None) -> Step:
    """A span for one turn of the agent loop (``call4agents.step``), current while open:
    ``with step(run_id, n) as s: response = call_model(); s.finish(StepFigures(...))``.
    ``span``: an instrumentation's own OpenTelemetry span of the step, still open, that gets
    the step's attributes and figures instead of a second span (it is not ended here).
    A shared no-op while no OpenTelemetry SDK records anything."""
    return observe.telemetry().step(run_id, index, span)


def run_entered(run_id: str, *, ledger: LedgerCore | None = None, trigger: Trigger) -> str | None:
    """Record at once that run ``run_id`` was entered with ``trigger``, for a framework that
    never sees its runs end (an MCP server): ``"retry"`` instead when the run had recorded
    actions before. A ledger write: call it off the event loop, once per run and process.
    The current span (the call's that entered the run) gets the trigger recorded.
    Returns the trigger recorded (None if the ledger could not be written)."""
    found = run_notes.record_entry(ledger, run_id, trigger)
    if found is not None:
        observe.telemetry().run_entered(run_id, found)
    return found


def check_trigger(value: object, owner: str = "OnceOnly") -> Trigger | None:
    """An integration's ``OnceOnly(trigger=...)``: one of TRIGGERS or None, else a clear error."""
    return run_notes.check_trigger(value, owner)


def ends_run(exc: BaseException) -> bool:
    """True for the outcomes that end the agent's run instead of going back to the model.

    A hard budget cut and an escalation are endings, not tool errors the model could work
    around: integrations re-raise them out of the framework's run (as the framework does with
    its own step limits), and never record them as a tool's result.
    """
    return isinstance(exc, (BudgetExceeded, Escalated))


def message_for_model(exc: Call4AgentsError) -> str:
    """A tool-error text for the model: what happened and that it must not simply retry."""
    if isinstance(exc, EffectInDoubt):
        return (
            f"Tool {exc.tool} may or may not have run ({exc.reason}); it was NOT run again. "
            "Do not call it again: tell the user it needs checking by a person (run "
            f"{exc.run_id!r}, action {exc.key[:12]})."
        )
    if isinstance(exc, EffectInProgress):
        return (
            f"Tool {exc.tool} is still running in another worker; it was not started again. "
            "Wait and ask for its result later rather than calling it with new arguments."
        )
    if isinstance(exc, ApprovalDenied):
        return f"Tool {exc.tool} was not run: {exc.reason}. Do not retry it."
    if isinstance(exc, ApprovalRequired) and exc.shown is not None:
        return (
            f"Tool {exc.tool} was not run: its arguments changed since they were shown to a "
            f"person (shown: {json.dumps(exc.shown.args, sort_keys=True)}; now: "
            f"{json.dumps(exc.request.args, sort_keys=True)}). A person must approve the new "
            "arguments; do not retry it."
        )
    if isinstance(exc, ApprovalRequired):
        return f"Tool {exc.tool} needs a person's approval before it runs; it has not run."
    if isinstance(exc, (ResultNotStored, ResultPruned)):
        return f"Tool {exc.tool} already ran; its result is not available. Do not run it again."
    return f"Tool call refused by Call4Agents: {exc}"


def __getattr__(name: str) -> Any:
    # The quickstarts' child-process helper, for the integrations' own demo rows: loaded on first
    # use, so that a tool-calling process does not import multiprocessing for it.
    if name == "quickstart_children":
        from .facade import _children

        return _children
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "ESCALATE_ON",
    "NOT_AN_ENVELOPE",
    "TRIGGERS",
    "Action",
    "Call4AgentsWarning",
    "EffectOptions",
    "LedgerCore",
    "OnceOnlySettings",
    "Row",
    "RunContext",
    "Step",
    "StepFigures",
    "ToolOptions",
    "Trigger",
    "Watch",
    "action_for",
    "arun_finished",
    "arun_tool",
    "canonical_args",
    "check_escalate_on",
    "check_ledger",
    "check_run_id",
    "check_trigger",
    "count_model_request",
    "current_run",
    "default_ledger",
    "ends_run",
    "escalate_by_policy",
    "external_id",
    "external_ids",
    "handoff",
    "idempotency_key",
    "is_in_doubt_error",
    "message_for_model",
    "note_unrecorded",
    "open_ticket",
    "options_for",
    "outcome_of",
    "quickstart_children",
    "record_model_usage",
    "recorded",
    "recorded_with_other_args",
    "register_tool_payload",
    "register_tool_payload_shape",
    "require_core",
    "run_continues",
    "run_entered",
    "run_finished",
    "run_part",
    "run_tool",
    "semconv",
    "shown_other_args",
    "step",
    "uncovered_call",
    "warn_once",
]

_warned: set[str] = set()
_warned_lock = threading.Lock()


def shown_other_args(action: Action) -> ApprovalRequest | None:
    """The ticket first shown for this framework call if it showed other arguments than the
    call now carries, else None.

    A framework's own yes (a ``RunState`` approval, a bare Pydantic AI approval, a resume value)
    is keyed by call id, not by arguments: when a saved state was edited after the call was
    shown, that yes must not be carried to the ticket of the new arguments. A person decides
    those in the ledger.
    """
    return first_shown(action.ledger, action)


def recorded(action: Action) -> Row | None:
    """The action's row as the ledger holds it now (one read), or None if it was never begun."""
    return action.ledger.store.get(action.key)


def recorded_with_other_args(action: Action, row: Row | None) -> bool:
    """Whether ``row`` (the action's row, just read) was recorded for other arguments.

    Compared by the digest of the arguments' key material, in which a redacted value counts by
    its HMAC.
    """
    if row is None:
        return False
    stored = action.ledger.store.stored_args(action.key)  # one read: gc may run between two
    if stored is None or stored.pruned:
        return False  # gc removed the arguments; the tombstone still answers the key
    return not action.same_args(stored.digest)


def open_ticket(action: Action) -> ApprovalRequest | None:
    """The live ticket for this call's arguments that a "no" can still reach: pending, or
    approved and not yet spent. A later no wins over a yes until the yes is used."""
    now = time.time()
    for ticket in action.ledger.approvals(run_id=action.run_id):
        live = ticket.state in ("pending", "approved") and ticket.expires_at > now
        if live and ticket.key == action.key and ticket.covers(action):
            return ticket
    return None


class Call4AgentsWarning(RuntimeWarning):
    """The category of every warning an integration gives (a side-effect call that runs without
    the ledger, a tool name that matches no tool): filter it as one, e.g.
    ``warnings.filterwarnings("ignore", category=Call4AgentsWarning)``."""


def warn_once(topic: str, message: str) -> None:
    """A ``Call4AgentsWarning`` shown once per process and topic (e.g. a side-effect tool with no
    stable run), filtered by its category like any other warning.

    Never an error for the call that gave it: where a filter turns warnings into exceptions
    (``-W error``, pytest's ``filterwarnings = error``) it is shown as a warning all the same,
    through ``warnings.showwarning`` (what Python calls to show one; pytest's recorder in a
    test), not logged: a suite asserting on its log records would see a record the framework
    alone never writes. ``ignore`` filters are honoured."""
    with _warned_lock:  # MCP keys calls in worker threads: two may warn at once
        if topic in _warned:
            return
        _warned.add(topic)
    try:
        warnings.warn(message, Call4AgentsWarning, stacklevel=3)
    except Warning as promoted:
        caller = sys._getframe(1)
        warnings.showwarning(
            str(promoted), Call4AgentsWarning, caller.f_code.co_filename, caller.f_lineno
        )


# -- hooks in the tool's own terms ----------------------------------------------------------------
# An integration records what its framework made of a tool's value (a ToolMessage, a
# CallToolResult), since a repeat must hand that back; the hooks a user writes speak of the value.


def undo_on_value(undo: Callable[..., Any], value_of: Callable[[Any], Any]) -> Callable[..., Any]:
    """An ``undo=`` given the tool's value (``value_of(recorded result)``), not the record."""

    @functools.wraps(undo)
    def adapted(result: Any, /, **arguments: Any) -> Any:
        return undo(value_of(result), **arguments)

    return adapted


def check_recording_as(
    check: Callable[..., Any], record: Callable[[Any], Any]
) -> Callable[..., Any]:
    """A ``check=`` whose ``Happened(value)`` is recorded as ``record(value)``; sync or async."""

    def convert(verdict: Any) -> Any:
        return Happened(record(verdict.result)) if isinstance(verdict, Happened) else verdict

    @functools.wraps(check)
    def adapted(**arguments: Any) -> Any:
        return when_done(check(**arguments), convert)

    return adapted


# -- what every integration's OnceOnly is given ---------------------------------------------------

_NO_TOOLS: Mapping[str, EffectOptions] = MappingProxyType({})
_OPTION_FIELDS = tuple(f.name for f in fields(EffectOptions))
_CORE_FLAG = "__c4a_core__"  # set by this project's `call4agents/__init__.py`, by no other


def require_core(extra: str) -> None:
    """Stop an integration's import when ``call4agents`` is not this project's core.

    PyPI's unrelated ``call4agents`` installs a package of the same name; its ``__init__`` lacks
    the flag ours sets. The message names the one fix, with the integration's extra."""
    if not getattr(sys.modules.get(__package__ or "call4agents"), _CORE_FLAG, False):
        raise ImportError(
            "the installed `call4agents` is not the Call4Agents core (PyPI has an unrelated "
            "project of that name): pip uninstall call4agents, then "
            f'pip install "call4agents-core[{extra}]"'
        )


def check_ledger(value: object, owner: str, *, url: bool = False) -> None:
    """``owner(ledger=...)``: an open ``c4a.Ledger`` or None (and a URL when ``url``), else a
    one-line ConfigurationError saying what to pass."""
    if value is None or isinstance(value, Ledger):
        return
    if not url or not isinstance(value, str):
        what = "a ledger URL such as 'postgresql+psycopg://host/db', " if url else ""
        raise ConfigurationError(
            f"{owner}(ledger=...) takes {what}an open c4a.Ledger, or None (c4a.init()'s); got "
            f"{type(value).__name__}"
        )
    if "://" not in value:
        raise ConfigurationError(
            f"{owner}(ledger={value!r}) is not a ledger URL: pass 'sqlite:///path.db' or "
            "'postgresql+psycopg://user@host/db'"
        )


@dataclass(frozen=True)
class OnceOnlySettings:
    """The settings every integration's ``OnceOnly`` takes, checked once by :meth:`check`.

    ``tools`` holds each named tool's options already laid over ``default`` (a misspelt field
    fails at start-up, not mid-run), ``escalate_on`` the policy as given: an integration adds
    it to the options its calls run with (:func:`with_escalate_on`) and adapts hooks to its
    framework's result shape itself. What only one framework has (MCP's ``identity=``, the
    Agents SDK's ``trust_state_approvals=``) stays in that integration.
    """

    ledger: Ledger | None = None
    tools: Mapping[str, EffectOptions] = field(default_factory=lambda: _NO_TOOLS)
    default: EffectOptions = field(default_factory=EffectOptions)
    budget: Budget | None = None
    escalate_on: frozenset[str] = frozenset()
    trigger: Trigger | None = None
    run_id: str | Callable[..., str | None] | None = None

    @classmethod
    def check(
        cls,
        *,
        ledger: object = None,
        tools: object = None,
        default: object = None,
        budget: object = None,
        escalate_on: object = (),
        trigger: object = None,
        run_id: object = None,
        owner: str = "OnceOnly",
    ) -> OnceOnlySettings:
        """The settings as given to ``owner(...)``, each checked; the first bad one raises a
        one-line ConfigurationError naming it and what it takes."""
        check_ledger(ledger, owner)
        if default is None:
            default = EffectOptions()
        elif not isinstance(default, EffectOptions):
            raise ConfigurationError(
                f"{owner}(default=...) takes a c4a.EffectOptions(...), not {type(default).__name__}"
            )
        if budget is not None and not isinstance(budget, Budget):
            raise ConfigurationError(
                f"{owner}(budget=...) takes a c4a.Budget, e.g. c4a.Budget(max_tool_calls=20, "
                f"max_model_requests=10), not {type(budget).__name__}"
            )
        return cls(
            ledger=ledger,  # type: ignore[arg-type]  # checked above
            tools=MappingProxyType(_checked_tools(tools, default, owner)),
            default=default,
            budget=budget,
            escalate_on=frozenset(check_escalate_on(escalate_on, owner)),
            trigger=check_trigger(trigger, owner),
            run_id=_checked_run_id(run_id, owner),
        )


def _checked_tools(tools: object, default: EffectOptions, owner: str) -> dict[str, EffectOptions]:
    """Each ``tools`` entry laid over ``default`` now, so a typo fails at construction."""
    if tools is None:
        return {}
    if not isinstance(tools, Mapping):
        raise ConfigurationError(
            f"{owner}(tools=...) takes a dict of options by tool name, e.g. "
            f'{{"lookup": {{"kind": "read"}}}}, not {type(tools).__name__}'
        )
    checked: dict[str, EffectOptions] = {}
    for name, given in tools.items():
        where = f"{owner}(tools={{{name!r}: ...}})"
        if not isinstance(given, (EffectOptions, Mapping)):
            raise ConfigurationError(
                f"{where} must be EffectOptions or a dict of its fields, not {type(given).__name__}"
            )
        unknown = sorted(set(given) - set(_OPTION_FIELDS)) if isinstance(given, Mapping) else []
        if unknown:
            raise ConfigurationError(
                f"{where}: unknown option(s) {', '.join(map(str, unknown))}. "
                f"Valid fields: {', '.join(_OPTION_FIELDS)}"
            )
        try:
            checked[name] = options_for(name, {name: given}, default)
        except (TypeError, ConfigurationError) as exc:  # a bad value, e.g. kind="reads"
            raise ConfigurationError(f"{where}: {exc}") from None
    return checked


def _checked_run_id(value: object, owner: str) -> str | Callable[..., str | None] | None:
    if value is None or callable(value):
        return value  # a function of the framework's context
    if isinstance(value, str):
        return check_run_id(value)
    raise ConfigurationError(
        f"{owner}(run_id=...) takes a stable id (a string) or a function returning one, not "
        f"{type(value).__name__}"
    )
