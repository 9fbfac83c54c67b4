"""Budget cuts and escalations: the endings of a run, on both sides of the wire.

An MCP server cannot stop its client's agent; what it can do, in MCP's own way, is answer the
``tools/call`` with an ``isError`` result that says the run has ended and why, in words for the
model and in ``_meta["io.call4agents/outcome"]`` for code::

    {"outcome": "escalated", "ends_run": true, "reason": ..., "run_id": ..., "handoff": {...}, ...}
    {"outcome": "budget_exceeded", "ends_run": true, "reason": "step_limit",
     "detail": "3 tool calls", "run_id": ..., ...}

The same details follow the text as a second text block, ``{"call4agents": {...}}`` in JSON: some
clients hand on only an error result's content (Pydantic AI's ``MCPToolset`` raises it as the
message of a ``ModelRetry``), and an error result has no ``structuredContent`` to carry them (it
would have to match the tool's ``outputSchema``).

On the client, :func:`ending_of` turns such a result back into the ``c4a.Escalated`` or
``c4a.BudgetExceeded`` the server raised, so an agent host can end its own run with it.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from call4agents import BudgetExceeded, Escalated, Handoff
from call4agents.integration import external_ids

from ._hooks import tool_value
from ._outcomes import OUTCOME_META, error_result

if TYPE_CHECKING:
    from call4agents.integration import Action

ESCALATED = "escalated"
BUDGET_EXCEEDED = "budget_exceeded"
_STOP = "This run has ended: do not call more tools; report what was done and what remains."


def answer(exc: BudgetExceeded | Escalated, tool: str, action: Action | None) -> dict[str, Any]:
    """The ``isError`` result that tells the client its run ended, and why."""
    key = {"action": action.key[:16]} if action is not None else {}
    if isinstance(exc, Escalated):
        handoff = _in_tool_terms(exc.handoff)
        found = error_result(
            ESCALATED,
            f"{handoff.text()}\n{_STOP}",
            tool=tool,
            retryable=False,
            ends_run=True,
            reason=handoff.reason,
            run_id=handoff.run_id,
            handoff=handoff.as_dict(),
            **key,
        )
    else:
        found = error_result(
            BUDGET_EXCEEDED,
            f"{exc} {_STOP}",
            tool=tool,
            retryable=False,
            ends_run=True,
            reason=exc.reason,
            detail=exc.detail,
            run_id=exc.run_id,
            **key,
        )
    details = {k: v for k, v in found["_meta"][OUTCOME_META].items() if k != "message"}
    block = json.dumps({"call4agents": details}, default=str)
    found["content"].append({"type": "text", "text": block})
    return found


def _in_tool_terms(handoff: Handoff) -> Handoff:
    """The hand-off with each result as the tool returned it (not the whole CallToolResult), and
    the external ids found in it: a tool's ids sit in its ``structuredContent``."""
    done = []
    for item in handoff.done:
        value = tool_value(item["result"])
        done.append({**item, "result": value, "external_ids": external_ids(value)})
    return dataclasses.replace(handoff, done=done)


def ending_of(result: Any) -> BudgetExceeded | Escalated | None:
    """The run ending a ``tools/call`` result reports, as the exception the server raised.

    ``result`` is a ``CallToolResult`` (or its dict). Returns ``c4a.Escalated`` (with
    ``.handoff``) or ``c4a.BudgetExceeded`` (with ``.reason``) for the answers of a server with
    ``OnceOnly`` that ended the run, else None. Raise it to end the agent's own run.
    """
    data = _as_dict(result)
    if data.get("isError") is not True:
        return None
    meta = data.get("_meta")
    found = _ending(meta.get(OUTCOME_META) if isinstance(meta, Mapping) else None)
    if found is None:  # an earlier development build put them in structuredContent
        structured = data.get("structuredContent")
        found = _ending(structured.get("call4agents") if isinstance(structured, Mapping) else None)
    return found


def ending_in_error(exc: BaseException) -> BudgetExceeded | Escalated | None:
    """The ending carried by a client's tool-error exception, if its message is our answer.

    Pydantic AI's ``MCPToolset`` raises ``ModelRetry`` for an ``isError`` result, with the
    result's content as JSON in the message: the text, then the ``{"call4agents": ...}`` block.
    """
    message = getattr(exc, "message", None)
    text = message if isinstance(message, str) else str(exc)
    if '"call4agents"' not in text:
        return None
    try:
        parsed = json.loads(text)
    except ValueError:
        return None
    for part in parsed if isinstance(parsed, list) else [parsed]:
        found = _ending(part.get("call4agents") if isinstance(part, Mapping) else None)
        if found is not None:
            return found
    return None


def _ending(info: Any) -> BudgetExceeded | Escalated | None:
    if not isinstance(info, Mapping) or info.get("ends_run") is not True:
        return None
    if info.get("outcome") == ESCALATED and isinstance(info.get("handoff"), Mapping):
        return Escalated(_handoff(info["handoff"]))
    if info.get("outcome") == BUDGET_EXCEEDED:
        return BudgetExceeded(
            run_id=str(info.get("run_id", "")),
            tool=str(info.get("tool", "")),
            reason=str(info.get("reason", "")),
            detail=str(info.get("detail", "")),
        )
    return None


def _as_dict(result: Any) -> dict[str, Any]:
    if isinstance(result, BaseModel):
        return result.model_dump(by_alias=True, mode="json", exclude_none=True)
    return dict(result) if isinstance(result, Mapping) else {}


def _handoff(data: Mapping[str, Any]) -> Handoff:
    return Handoff(
        run_id=str(data.get("run_id", "")),
        reason=str(data.get("reason", "")),
        blocking_fact=data.get("blocking_fact"),
        what_remains=list(data.get("what_remains") or []),
        done=list(data.get("done") or []),
        in_doubt=list(data.get("in_doubt") or []),
        failed=list(data.get("failed") or []),
        escalated_at=data.get("escalated_at"),
    )
