"""Each action's span under a LangChain OpenTelemetry instrumentation's span of the tools node,
and each step's attributes on its span of the model node.

OpenInference's LangChain instrumentation makes its spans from LangChain callbacks and never makes
them current, so a span started inside a tool call would start a trace of its own. While that
instrumentation is on, the span of the run that called the tool (the tools node) is made current
for the call, and the core's ``execute_tool`` span nests under it. Nothing here imports
OpenTelemetry or the instrumentation unless the application already imported it.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any

_OPENINFERENCE = "openinference.instrumentation.langchain"


def instrumentation_span() -> Any:
    """The instrumentation's open span of the LangChain run calling us (inside a model call's
    middleware: the ``model`` node's span), or None when no instrumentation is on."""
    return _node_span()


@contextlib.contextmanager
def instrumented_parent() -> Iterator[None]:
    """Make the instrumentation's span of the calling node current, when there is one."""
    span = _node_span()
    if span is None:
        yield
        return
    from opentelemetry import context, trace

    token = context.attach(trace.set_span_in_context(span))
    try:
        yield
    finally:
        context.detach(token)


def _node_span() -> Any:
    module = sys.modules.get(_OPENINFERENCE)  # imported by an application that turned it on
    if module is None:
        return None
    try:
        if not module.LangChainInstrumentor().is_instrumented_by_opentelemetry:
            return None
        span = module.get_current_span()
    except Exception:  # noqa: BLE001 - another version's API: keep the usual parent
        return None
    return span if span is not None and span.is_recording() else None
