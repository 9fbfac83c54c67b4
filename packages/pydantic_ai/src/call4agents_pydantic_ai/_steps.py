"""One ``call4agents.step`` span per model request: why the model stopped, which model, tokens.

Pydantic AI's own instrumentation (``Agent(instrument=True)``) makes a ``chat <model>`` span for
the request itself; it runs inside the handler, so it nests under the step instead of beside it.
"""

from __future__ import annotations

from typing import Any

from pydantic_ai.messages import ModelResponse, ToolCallPart

from call4agents.integration import StepFigures

_STOPS = {"tool_call": "tool_call", "stop": "end", "length": "token_limit"}
_STOPS["content_filter"] = "refusal"


def figures(response: ModelResponse) -> StepFigures:
    """What the response says. Pydantic AI counts a figure the provider did not give as 0, so
    zero tokens all round means "not given" and leaves them unset; a zero cache figure too."""
    usage = response.usage
    given = bool(usage.input_tokens or usage.output_tokens)
    return StepFigures(
        stop_reason=stop_reason(response),
        model=response.model_name or None,
        input_tokens=usage.input_tokens if given else None,
        output_tokens=usage.output_tokens if given else None,
        cache_read_tokens=usage.cache_read_tokens or None,
        cache_write_tokens=usage.cache_write_tokens or None,
        finish_reason=response.finish_reason,
    )


def stop_reason(response: ModelResponse) -> str | None:
    found: Any = response.finish_reason
    if found in _STOPS:
        return _STOPS[found]
    if any(isinstance(p, ToolCallPart) for p in response.parts):
        return "tool_call"
    return "end" if found is None else None
