"""One ``call4agents.step`` span per model call of ``create_agent``: why the model stopped, which
model, tokens with cache reads and writes apart, where the chat model reports them.

A chat model that reports no usage (``usage_metadata`` absent) leaves the token attributes unset.
With OpenInference's LangChain instrumentation on, that instrumentation already has a span of the
step: its span of the ``model`` node, whose child is its LLM span of the call. The step's
attributes go on that node span instead of a second span of ours beside it (the instrumentation
never makes its spans current, so a span of ours would not nest with its tree).
"""

from __future__ import annotations

from typing import Any

from langchain.agents.middleware.types import ExtendedModelResponse, ModelRequest, ModelResponse
from langchain_core.messages import AIMessage

from call4agents.integration import Step, StepFigures
from call4agents.integration import step as _step

from ._otel_parent import instrumentation_span

# Providers' words for why generation stopped, as LangChain passes them on in response_metadata.
_STOPS = {
    "tool_calls": "tool_call",
    "tool_use": "tool_call",
    "function_call": "tool_call",
    "stop": "end",
    "end_turn": "end",
    "stop_sequence": "end",
    "length": "token_limit",
    "max_tokens": "token_limit",
    "content_filter": "refusal",
    "refusal": "refusal",
    "safety": "refusal",
}


def step(run_id: str | None, request: ModelRequest[Any]) -> Step:
    """The step's span; its index counts the model's answers so far in the thread, so it
    continues across resumes."""
    answered = sum(isinstance(m, AIMessage) for m in request.messages)
    return _step(run_id, answered + 1, instrumentation_span())


def finish(turn: Step, response: Any) -> str | None:
    """Put the answer's figures on the step; its stop reason (``end``: the run is done)."""
    message = _answer(response)
    if message is None:
        return None
    figures = _figures(message)
    turn.finish(figures)
    return figures.stop_reason


def _answer(response: Any) -> AIMessage | None:
    if isinstance(response, ExtendedModelResponse):
        response = response.model_response
    found = list(response.result) if isinstance(response, ModelResponse) else [response]
    answers = [m for m in found if isinstance(m, AIMessage)]
    return answers[-1] if answers else None


def _figures(message: AIMessage) -> StepFigures:
    meta = message.response_metadata or {}
    said = meta.get("finish_reason") or meta.get("stop_reason")
    stop = "tool_call" if message.tool_calls else _STOPS.get(str(said)) if said else "end"
    usage = message.usage_metadata
    details: dict[str, Any] = dict(usage.get("input_token_details") or {}) if usage else {}
    model = meta.get("model_name") or meta.get("model")
    return StepFigures(
        stop_reason=stop,
        model=str(model) if model else None,
        input_tokens=int(usage["input_tokens"]) if usage else None,
        output_tokens=int(usage["output_tokens"]) if usage else None,
        cache_read_tokens=_count(details.get("cache_read")),
        cache_write_tokens=_count(details.get("cache_creation")),
        finish_reason=str(said) if said else None,
    )


def _count(value: Any) -> int | None:
    return int(value) if isinstance(value, int) else None
