"""How a tool call that did not simply succeed goes back to the model, in Pydantic AI's shapes.

A tool's own exception is not this module's: the capability raises it to Pydantic AI as it was
raised, once the ledger recorded it. What the ledger itself refuses (a call in doubt, still
running elsewhere, with no stable arguments) becomes ``ModelRetry``: a tool error result that
spends the tool's ``retries=``, so a model that keeps calling an in-doubt tool ends the run with
Pydantic AI's own ``UnexpectedModelBehavior`` rather than looping to the request limit. A "no"
becomes ``ToolDenied`` (``outcome='denied'``), the shape Pydantic AI itself uses for a denied
deferred call.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from pydantic_ai import ToolDenied
from pydantic_ai.exceptions import (
    ApprovalRequired,
    CallDeferred,
    ModelRetry,
    SkipToolExecution,
    ToolFailed,
    ToolFailedError,
    ToolRetryError,
)

from call4agents import (
    ApprovalDenied,
    Call4AgentsError,
    ConfigurationError,
    LedgerError,
    UnstableArguments,
)
from call4agents.integration import message_for_model

# Pydantic AI's own control flow raised by a tool or an inner hook: it passes through untouched.
CONTROL_FLOW: tuple[type[BaseException], ...] = (
    ApprovalRequired,
    CallDeferred,
    ModelRetry,
    SkipToolExecution,
    ToolFailed,
    ToolFailedError,
    ToolRetryError,
)


@dataclass
class ToolCall:
    """What the tool itself did in this process: returned a value, or raised."""

    value: Any = None
    returned: bool = False
    raised: BaseException | None = None

    def own(self, exc: BaseException) -> BaseException | None:
        """The tool's own exception when ``exc`` is it (or its timeout recorded as in doubt)."""
        raised = self.raised
        if raised is not None and (exc is raised or exc.__cause__ is raised):
            return raised
        return None


def refused(exc: Call4AgentsError) -> ModelRetry | ToolDenied:
    """The tool result for a call the ledger did not run (in doubt, in progress, denied...).

    A setup mistake (no ledger open) or a database fault is the developer's to see, not the
    model's, so those are raised as they are.
    """
    if isinstance(exc, LedgerError) or (
        isinstance(exc, ConfigurationError) and not isinstance(exc, UnstableArguments)
    ):
        raise exc
    if isinstance(exc, ApprovalDenied):
        return ToolDenied(message_for_model(exc))
    return ModelRetry(message_for_model(exc))


def timed_out(exc: BaseException) -> bool:
    """Whether a TimeoutError sits anywhere in the error's chain.

    Pydantic AI turns a tool's ``timeout=`` into ``ModelRetry('Timed out after ...')`` raised
    ``from None``, and may leave the tool's thread running: the call may still act, so it is in
    doubt, not failed. The TimeoutError survives as the suppressed ``__context__``.
    """
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        current = todo.pop()
        if current is None or id(current) in seen:
            continue
        if isinstance(current, (TimeoutError, asyncio.TimeoutError)):
            return True
        seen.add(id(current))
        todo.extend((current.__cause__, current.__context__))
    return False
