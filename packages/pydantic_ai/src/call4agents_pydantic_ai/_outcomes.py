"""How a tool call that did not simply succeed goes back to the model, in Pydantic AI's shapes.

``ToolFailed`` becomes a tool return with ``outcome='failed'`` and, unlike ``ModelRetry``, spends
no retry budget and adds no "please try again" text: an in-doubt call must never turn into a loop
that calls the same tool again. A "no" becomes ``ToolDenied`` (``outcome='denied'``), the shape
Pydantic AI itself uses for a denied deferred call.
"""

from __future__ import annotations

import asyncio

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
    EffectInDoubt,
    LedgerError,
    UnstableArguments,
)
from call4agents.integration import Action, message_for_model

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


def refused(exc: Call4AgentsError) -> ToolFailed | ToolDenied:
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
    return ToolFailed(message_for_model(exc))


def tool_raised(action: Action, exc: Exception, *, attempt: int, in_doubt: bool) -> ToolFailed:
    """The tool result for a tool that raised: failed (it did not act) or in doubt."""
    error = action.error_text(exc)
    if in_doubt:
        doubt = EffectInDoubt(
            key=action.key,
            run_id=action.run_id,
            tool=action.tool,
            reason=f"it raised {error}",
            attempt=attempt,
        )
        return ToolFailed(message_for_model(doubt))
    return ToolFailed(
        f"Tool {action.tool} failed and did not take effect: {error}. You may call it again "
        "once the cause is fixed."
    )


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
