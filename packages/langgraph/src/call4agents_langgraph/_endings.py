"""Budget cuts and escalations end the LangGraph run; they never reach the model as a tool error.

LangGraph and LangChain already have one signal that every error handler lets through:
``GraphBubbleUp`` (what ``interrupt()`` raises). ``ToolNode(handle_tool_errors=True)``,
``ToolErrorMiddleware``, ``ToolRetryMiddleware``, ``ModelRetryMiddleware`` and node retry
policies all re-raise it untouched, and the graph raises it out of ``invoke``. So an ending
leaves OnceOnly as a copy of itself that is also a ``GraphBubbleUp``: still a
``c4a.BudgetExceeded`` or ``c4a.Escalated`` for the caller's ``except``, but never turned into a
message, retried, or routed to an error handler on the way out.

An escalation raised by the tool itself may be caught before OnceOnly sees it (a ToolNode that
handles tool errors, a ToolErrorMiddleware listed after OnceOnly). LangChain reports every tool
error to the callbacks of the tool's run first, so a watcher registered as a configure hook sees
it there, and OnceOnly re-raises it when the handler hands back the error message.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.tracers.context import register_configure_hook
from langgraph.errors import GraphBubbleUp

from call4agents.integration import ends_run

_signals: dict[type[BaseException], type[BaseException]] = {}


def as_signal(exc: BaseException) -> BaseException:
    """``exc`` (an ending) as the same exception that is also a LangGraph control-flow signal."""
    if isinstance(exc, GraphBubbleUp):
        return exc
    cls = type(exc)
    kind = _signals.get(cls)
    if kind is None:
        # Named like the original, so a traceback reads "call4agents.runs.BudgetExceeded: ...".
        namespace = {"__module__": cls.__module__, "__qualname__": cls.__qualname__}
        kind = type(cls.__name__, (cls, GraphBubbleUp), namespace)
        _signals[cls] = kind
    signal = BaseException.__new__(kind, *exc.args)  # the same message, no __init__ re-run
    signal.__dict__.update(exc.__dict__)  # run_id, reason, handoff, ...
    signal.__cause__ = exc.__cause__
    signal.__suppress_context__ = True  # the original is this very exception: not shown twice
    return signal.with_traceback(exc.__traceback__)


class Watcher(BaseCallbackHandler):
    """Remembers the first ending a tool raised, whoever then turned it into a message."""

    run_inline = True  # called in the tool's own thread or task, before the error is handled
    # Only tool events matter (LangChain files them under "agent"); skip the rest cheaply.
    ignore_llm = ignore_chain = ignore_retriever = True
    ignore_chat_model = ignore_custom_event = ignore_retry = True

    def __init__(self) -> None:
        self.found: BaseException | None = None

    def on_tool_error(self, error: BaseException, **kwargs: Any) -> None:
        if self.found is None and ends_run(error):
            self.found = error

    def raise_found(self) -> None:
        """Raise the ending a tool raised, if one was turned into an error message."""
        if self.found is not None:
            raise self.found


_watching: ContextVar[Watcher | None] = ContextVar("call4agents_langgraph_watcher", default=None)
# LangChain adds the handler held by this variable to every callback manager configured while it
# is set: the tool's run and runs inside it. Not inherited, so it is never added twice.
register_configure_hook(_watching, inheritable=False)


@contextlib.contextmanager
def watch() -> Iterator[Watcher]:
    """Watch the tool runs started inside the block for an ending."""
    watcher = Watcher()
    token = _watching.set(watcher)
    try:
        yield watcher
    finally:
        _watching.reset(token)
