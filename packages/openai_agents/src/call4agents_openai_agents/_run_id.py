"""Which run a tool call belongs to: the id that stays the same when the agent resumes.

A ``RunState`` has no id of its own and the SDK does not show tools which ``Session`` a run uses,
so the id is looked for, in order, in:

1. the session, when it was passed as ``session=once.session(session)``: its ``session_id``;
2. the run context: an attribute ``call4agents_run_id`` on the context object, or that key when
   the context is a mapping (a mapping context is saved with a ``RunState``, so the id survives a
   pause and a resume in another process);
3. an enclosing ``with c4a.run("<id>"):`` around ``Runner.run``;
4. ``OnceOnly(run_id=...)``: a string, or a function of the run context returning one.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Mapping
from typing import Any

from agents import RunContextWrapper, Usage

from call4agents import ConfigurationError
from call4agents.integration import check_run_id, current_run

CONTEXT_KEY = "call4agents_run_id"
"""The attribute (or mapping key) of the run context that names the run."""

RunIdSource = str | Callable[[RunContextWrapper[Any]], str | None] | None

# The SDK creates one Usage per run and hands the same object to every tool context of that run
# (agents used as tools included), so it identifies "this run" without touching SDK internals.
_sessions: dict[int, tuple[weakref.ref[Usage], str]] = {}
_lock = threading.Lock()


def remember_session(wrapper: RunContextWrapper[Any] | None, session_id: str) -> None:
    """Bind the run that owns ``wrapper`` to a session id; the first session seen wins."""
    if wrapper is None:
        return
    usage = wrapper.usage
    key = id(usage)
    with _lock:
        known = _sessions.get(key)
        if known is not None and known[0]() is usage:
            return  # an agent used as a tool has its own session; the outer run keeps its id
        _sessions[key] = (weakref.ref(usage, lambda _: _forget(key)), session_id)


def _forget(key: int) -> None:
    with _lock:
        found = _sessions.get(key)
        if found is not None and found[0]() is None:
            del _sessions[key]


def _session_id(wrapper: RunContextWrapper[Any]) -> str | None:
    usage = wrapper.usage
    with _lock:
        found = _sessions.get(id(usage))
    return found[1] if found is not None and found[0]() is usage else None


def _context_id(wrapper: RunContextWrapper[Any]) -> str | None:
    context = wrapper.context
    if isinstance(context, Mapping):
        value = context.get(CONTEXT_KEY)
    else:
        value = getattr(context, CONTEXT_KEY, None)
    return None if value is None else check_run_id(value)


def resolve_run_id(wrapper: RunContextWrapper[Any], given: RunIdSource) -> str | None:
    """The run id of the run that owns ``wrapper``, or None when no source names one."""
    found = _session_id(wrapper) or _context_id(wrapper)
    if found:
        return found
    run = current_run()
    if run is not None:
        return run.run_id
    if callable(given):
        value = given(wrapper)
        return None if value is None else check_run_id(value)
    return given


def require_run_id(wrapper: RunContextWrapper[Any], given: RunIdSource, tool: str) -> str:
    """The run id, or a ConfigurationError that says how to give one."""
    found = resolve_run_id(wrapper, given)
    if found is None:
        raise ConfigurationError(
            f"{tool} has side effects, but this run has no stable id, so Call4Agents cannot make "
            "it once-only. Give the run an id that survives a resume: "
            'Runner.run(..., session=once.session(SQLiteSession("<id>"))), or a context with '
            f'{CONTEXT_KEY} (an attribute, or a key of a dict context), or `with c4a.run("<id>"):`'
            " around Runner.run, or OnceOnly(run_id=...)."
        )
    return found
