"""Model requests of a create_agent run, counted against its budget in the ledger.

LangChain's own ``ModelCallLimitMiddleware`` keeps its count in the graph state, so a resume from
an earlier checkpoint or a second worker starts it again. Here each request is counted in the
ledger just before it is made (``c4a.count_model_request``), the tokens the response reports
(``AIMessage.usage_metadata``) are added after it, and past the budget's soft threshold the model
is told to wrap up by one more part of its system message, on that request only (the graph state
is not changed).
"""

from __future__ import annotations

import asyncio
from typing import Any

from langchain.agents.middleware import ModelRequest, ModelResponse
from langchain.agents.middleware.types import ExtendedModelResponse
from langchain_core.messages import AIMessage, BaseMessage, SystemMessage

from call4agents import BudgetUsage, Ledger
from call4agents.integration import count_model_request, current_run, record_model_usage


def budgeted() -> bool:
    """Whether the current run has a budget (only then is there anything to count)."""
    run = current_run()
    return run is not None and run.budget is not None


def before(request: ModelRequest[Any], ledger: Ledger | None) -> ModelRequest[Any]:
    """Count the request (raising ``BudgetExceeded`` past a hard limit) and add the wrap-up note."""
    if not budgeted():
        return request
    return with_note(request, count_model_request(ledger=ledger))


async def abefore(request: ModelRequest[Any], ledger: Ledger | None) -> ModelRequest[Any]:
    if not budgeted():
        return request
    usage = await asyncio.to_thread(count_model_request, ledger=ledger)
    return with_note(request, usage)


def after(response: Any, ledger: Ledger | None) -> None:
    """Add the tokens the response reports to the run's budget."""
    if not budgeted():
        return
    tokens = _tokens(response)
    if tokens is not None:
        record_model_usage(*tokens, ledger=ledger)


async def aafter(response: Any, ledger: Ledger | None) -> None:
    if not budgeted():
        return
    tokens = _tokens(response)
    if tokens is not None:
        await asyncio.to_thread(record_model_usage, *tokens, ledger=ledger)


def with_note(request: ModelRequest[Any], usage: BudgetUsage | None) -> ModelRequest[Any]:
    note = usage.wrap_up_note() if usage is not None else None
    if note is None:
        return request
    return request.override(system_message=_noted(request.system_message, note))


def _noted(system: SystemMessage | None, note: str) -> SystemMessage:
    """The system message with the note as its own last part (providers want one system message,
    first, so the note joins it rather than following the conversation)."""
    if system is None:
        return SystemMessage(content=note)
    content = system.content
    if isinstance(content, str):
        joined: Any = f"{content}\n\n{note}" if content else note
    else:
        joined = [*content, {"type": "text", "text": note}]
    return system.model_copy(update={"content": joined})


def _tokens(response: Any) -> tuple[int, int] | None:
    messages: list[BaseMessage]
    if isinstance(response, ExtendedModelResponse):
        response = response.model_response
    if isinstance(response, ModelResponse):
        messages = list(response.result)
    elif isinstance(response, AIMessage):
        messages = [response]
    else:
        return None
    found = [m.usage_metadata for m in messages if isinstance(m, AIMessage) and m.usage_metadata]
    if not found:
        return None
    return (
        sum(int(u.get("input_tokens") or 0) for u in found),
        sum(int(u.get("output_tokens") or 0) for u in found),
    )
