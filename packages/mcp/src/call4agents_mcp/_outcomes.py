"""What a ``tools/call`` answers when it is not simply the tool's fresh result.

Every answer here is a ``CallToolResult``-shaped dict: a replayed first result, or an ``isError``
result whose text says what happened (for the model) and whose ``_meta["io.call4agents/outcome"]``
says the same for code: ``{"outcome": ..., "tool": ..., "retryable": ..., "message": ..., ...}``.

An error result carries no ``structuredContent``: a tool's ``outputSchema`` describes its results,
and a client that validates (the TypeScript SDK, the MCP Inspector) rejects an error result whose
``structuredContent`` does not match it. ``_meta`` is where MCP lets a server add its own fields.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from contextvars import ContextVar
from typing import Any, Final

from mcp.server.mcpserver.exceptions import UnexpectedToolError
from pydantic import BaseModel

from call4agents import (
    ApprovalDenied,
    ApprovalRequired,
    Call4AgentsError,
    EffectInDoubt,
    EffectInProgress,
    LedgerError,
    ResultNotStored,
    ResultPruned,
)
from call4agents.integration import Action, ends_run, message_for_model

OUTCOME_META: Final = "io.call4agents/outcome"
"""``_meta`` field of an answer the ledger gave: ``{"outcome": "replayed" | "in_doubt" | ...}``,
with the details of an error result (``tool``, ``retryable``, ``message``, ...) beside it."""


class KeyReused(Call4AgentsError):
    """A client key arrived again with other arguments: refused, as Stripe refuses it."""

    def __init__(self, tool: str) -> None:
        self.tool = tool
        super().__init__(
            f"This idempotency key was first used with other arguments for {tool}, so this call "
            "was refused and not run. Keys can only be reused with the same arguments; send a "
            "new key for a different call."
        )


# -- tool results that the ledger must not keep as the answer ----------------------------------


class NotTheAnswer(Exception):
    """A round that is not the call's answer: the ledger records it as failed (not acted)."""

    def __init__(self, why: str) -> None:
        super().__init__(why)


class ToolErrorResult(Exception):
    """The tool answered with an error result, its exception unknown: it did not act (failed)."""

    def __init__(self, result: Mapping[str, Any]) -> None:
        super().__init__(f"the tool returned an error: {error_text(result)}")


def as_dict(result: Any) -> dict[str, Any]:
    """A handler or middleware result as its JSON dict (the SDK's own dump settings)."""
    if result is None:
        return {}
    if isinstance(result, BaseModel):
        return result.model_dump(by_alias=True, mode="json", exclude_none=True)
    if isinstance(result, Mapping):
        return dict(result)
    raise TypeError(f"tools/call returned {type(result).__name__}, not a result")


def error_text(result: Mapping[str, Any]) -> str:
    """The first text of an error result, shortened, for the ledger's error column."""
    for block in result.get("content") or ():
        if isinstance(block, Mapping) and block.get("type") == "text":
            return str(block.get("text", ""))[:500]
    return "the tool returned an error result"


# -- which tool errors leave the world in doubt -------------------------------------------------

# MCPServer turns a tool's exception into an isError result before any middleware sees it, and
# logs the exception (with its cause) on this logger as it does. A filter on the logger is the
# SDK's only public view of the exception's type, which decides between "failed" (it did not act,
# run it again) and "in doubt" (a timeout, OutcomeUnknown: never run blindly). Without the log
# record (logging disabled for the SDK) an error result counts as failed, the core's default.
_SDK_LOGGER: Final = "mcp.server.mcpserver.server"
_witness: ContextVar[list[BaseException] | None] = ContextVar("c4a_mcp_witness", default=None)


class _ToolErrorWitness(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        seen = _witness.get()
        if seen is not None and record.exc_info and record.exc_info[1] is not None:
            seen.append(record.exc_info[1])
            cause = original(record.exc_info[1])
            if ends_run(cause):
                _as_an_ending(record, cause)
        return True  # the record is logged, as the SDK meant or as an ending


def _as_an_ending(record: logging.LogRecord, cause: BaseException) -> None:
    """An escalation or a budget cut is how a run ends, not a crash of the tool: say it at
    INFO, without the traceback the SDK logs for an unexpected exception."""
    args = record.args if isinstance(record.args, tuple) else ()
    tool = f"Tool {args[0]!r}" if args else "A tool"
    record.msg = f"{tool} ended its run: {type(cause).__name__}: {cause}"
    record.args = None
    record.levelno, record.levelname = logging.INFO, logging.getLevelName(logging.INFO)
    record.exc_info = record.exc_text = None


_WITNESS = _ToolErrorWitness()


def install_witness() -> None:
    logger = logging.getLogger(_SDK_LOGGER)
    if _WITNESS not in logger.filters:
        logger.addFilter(_WITNESS)


def watch() -> tuple[list[BaseException], Any]:
    """Start collecting the tool exceptions the SDK logs in this task; returns (seen, token)."""
    seen: list[BaseException] = []
    return seen, _witness.set(seen)


def stop_watching(token: Any) -> None:
    _witness.reset(token)


def original(exc: BaseException) -> BaseException:
    """The tool's own exception under the SDK's wrappers (it wraps with ``raise ... from``)."""
    while isinstance(exc, UnexpectedToolError) and exc.__cause__ is not None:
        exc = exc.__cause__
    return exc


# -- answers ------------------------------------------------------------------------------------


def error_result(
    outcome: str, text: str, *, tool: str, retryable: bool, **info: Any
) -> dict[str, Any]:
    details = {"outcome": outcome, "tool": tool, "retryable": retryable, "message": text, **info}
    return {
        "content": [{"type": "text", "text": text}],
        "isError": True,
        "_meta": {OUTCOME_META: details},
    }


def refusal(exc: Call4AgentsError, tool: str, action: Action | None = None) -> dict[str, Any]:
    """The isError answer for a call the ledger did not (or could not) run now."""
    key = {"action": action.key[:16]} if action is not None else {}
    if isinstance(exc, EffectInDoubt):
        return error_result(
            "in_doubt", message_for_model(exc), tool=tool, retryable=False, reason=exc.reason, **key
        )
    if isinstance(exc, EffectInProgress):
        return error_result("in_progress", message_for_model(exc), tool=tool, retryable=True, **key)
    if isinstance(exc, ApprovalRequired):
        request = exc.request.as_dict() if hasattr(exc.request, "as_dict") else None
        text = message_for_model(exc) + f" Approval ticket: {getattr(exc.request, 'ticket', '?')}."
        return error_result(
            "approval_required", text, tool=tool, retryable=True, approval=request, **key
        )
    if isinstance(exc, ApprovalDenied):
        return error_result("denied", message_for_model(exc), tool=tool, retryable=False, **key)
    if isinstance(exc, (ResultNotStored, ResultPruned)):
        text = message_for_model(exc)
        return error_result("result_unavailable", text, tool=tool, retryable=False, **key)
    if isinstance(exc, KeyReused):
        return error_result("key_reused", str(exc), tool=tool, retryable=False, **key)
    if isinstance(exc, LedgerError):
        text = f"Tool {tool} was not run: the Call4Agents ledger is unavailable ({exc})."
        return error_result("ledger_unavailable", text, tool=tool, retryable=True)
    return error_result("refused", message_for_model(exc), tool=tool, retryable=False, **key)


def first_in_doubt(action: Action, cause: BaseException) -> dict[str, Any]:
    """The answer of the attempt whose tool failed in a way that leaves it unknown if it acted."""
    reason = action.error_text(cause)
    text = (
        f"Tool {action.tool} failed with {reason}, which may have left it half done. It is "
        "recorded as in doubt and will not be run again until someone checks whether it "
        f"happened (action {action.key[:12]}). Do not call it again."
    )
    return error_result(
        "in_doubt", text, tool=action.tool, retryable=False, reason=reason, action=action.key[:16]
    )


def mark_failed(result: Mapping[str, Any], action: Action) -> dict[str, Any]:
    """A tool's own error result, its ``_meta`` saying it did not act (a safe retry); the rest is
    the tool's, as it sent it."""
    details = {
        "outcome": "failed",
        "tool": action.tool,
        "retryable": True,
        "message": error_text(result),
        "action": action.key[:16],
    }
    return {**result, "_meta": {**(result.get("_meta") or {}), OUTCOME_META: details}}


def replayed(stored: Mapping[str, Any], action: Action) -> dict[str, Any]:
    """The first result, marked as a replay (the tool did not run for this request)."""
    return _marked(stored, "replayed", action)


def found_existing(stored: Mapping[str, Any], action: Action) -> dict[str, Any]:
    """What the tool's ``find_existing=`` hook found, recorded as its result; the tool did not
    run, because what it would have made already exists."""
    return _marked(stored, "found_existing", action)


def _marked(stored: Mapping[str, Any], outcome: str, action: Action) -> dict[str, Any]:
    answer = dict(stored)
    marker = {"outcome": outcome, "action": action.key[:16]}
    answer["_meta"] = {**(stored.get("_meta") or {}), OUTCOME_META: marker}
    return answer
