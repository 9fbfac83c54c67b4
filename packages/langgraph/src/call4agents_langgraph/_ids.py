"""Where a LangGraph call's stable identity comes from: the thread, and inside it the task."""

from __future__ import annotations

from typing import Any

from call4agents import ConfigurationError

BRANCH_KEY = "call4agents_branch"
"""State key naming a re-run branch of a thread; see ``OnceOnly.rerun``."""


def no_thread_error(where: str) -> ConfigurationError:
    return ConfigurationError(
        f"{where} has no LangGraph thread id, so there is no id that survives a resume to make "
        "it once-only. Give the graph a checkpointer (create_agent(..., checkpointer=...) or "
        "builder.compile(checkpointer=...)) and invoke it with "
        "config={'configurable': {'thread_id': '<id that survives a resume>'}}."
    )


def thread_run_id(execution_info: Any, state: Any, where: str) -> str:
    """The run id of a call: the thread id, plus the re-run branch if one was started."""
    thread_id = getattr(execution_info, "thread_id", None) if execution_info else None
    if not thread_id:
        raise no_thread_error(where)
    branch = state.get(BRANCH_KEY) if isinstance(state, dict) else getattr(state, BRANCH_KEY, None)
    return f"{thread_id}#{branch}" if branch else str(thread_id)
