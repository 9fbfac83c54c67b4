"""One ``call4agents.step`` OpenTelemetry span per model request of an Agents SDK run.

The SDK has no hook around a model request, only the agent's ``on_llm_start`` and ``on_llm_end``
hooks before and after it, each run in a task of its own (so nothing they make current outlives
them). The step's span is opened in the first, kept with the run's context wrapper, and given
the response's figures and ended in the second. Its parent is the span current around
``Runner.run``. A request that raised (the SDK raises on a response cut short) never reaches
``on_llm_end``: its span is never ended, so never exported, and goes with the run's context.

The SDK's own traces (``agents.tracing``) are not OpenTelemetry, so nothing of theirs nests here.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

from agents import RunContextWrapper, Usage

from call4agents.integration import Step, StepFigures, step

if TYPE_CHECKING:
    from agents import Agent
    from agents.items import ModelResponse

# Output items the SDK itself acts on and then asks the model again: the model stopped to call a
# tool. Hosted tools (web search, file search, code interpreter) run inside the response instead.
_TOOL_CALLS = frozenset(
    {
        "function_call",
        "computer_call",
        "local_shell_call",
        "shell_call",
        "apply_patch_call",
        "custom_tool_call",
        "mcp_approval_request",
    }
)

# The open step of each run, by its context wrapper (one model request at a time per run).
_open: weakref.WeakKeyDictionary[RunContextWrapper[Any], tuple[Step, str | None]] = (
    weakref.WeakKeyDictionary()
)


def started(wrapper: RunContextWrapper[Any], agent: Agent[Any], run_id: str | None) -> None:
    """A model request is about to be sent: open its step."""
    # Requests already answered in this run (kept in a resumed RunState too), so the index
    # continues across resumes and handoffs.
    turn = step(run_id, wrapper.usage.requests + 1)
    if type(turn) is not Step:  # the base class is the shared no-op: nothing records steps
        _open[wrapper] = (turn, model_name(agent))


def ended(wrapper: RunContextWrapper[Any], response: ModelResponse) -> None:
    """The request was answered: put its figures on the step and end it."""
    found = _open.pop(wrapper, None)
    if found is None:
        return
    turn, model = found
    with turn:  # current for an instant only: the hook's task ends right after
        turn.finish(figures(response, model))


def figures(response: ModelResponse, model: str | None) -> StepFigures:
    """What the response says. The SDK counts a figure the provider did not give as 0, so zero
    tokens all round means "not given" and leaves them unset; a zero cache figure too."""
    usage: Usage = response.usage
    given = bool(usage.input_tokens or usage.output_tokens)
    details = usage.input_tokens_details
    return StepFigures(
        stop_reason=stop_reason(response),
        model=model,
        input_tokens=usage.input_tokens if given else None,
        output_tokens=usage.output_tokens if given else None,
        cache_read_tokens=_count(getattr(details, "cached_tokens", None)),
        cache_write_tokens=_count(getattr(details, "cache_write_tokens", None)),
    )


def stop_reason(response: ModelResponse) -> str:
    """``tool_call``, ``refusal``, ``token_limit`` (a message the provider marked incomplete)
    or ``end``, read from the response's output items."""
    kinds = {getattr(item, "type", None) for item in response.output}
    if kinds & _TOOL_CALLS:
        return "tool_call"
    messages = [item for item in response.output if getattr(item, "type", None) == "message"]
    parts = [getattr(part, "type", None) for m in messages for part in getattr(m, "content", [])]
    if "refusal" in parts:
        return "refusal"
    if any(getattr(m, "status", None) == "incomplete" for m in messages):
        return "token_limit"
    return "end"


def model_name(agent: Agent[Any]) -> str | None:
    """The agent's model id: its ``model`` string, or the name its Model object was made with.
    The SDK's response does not say which model answered; a model chosen by the RunConfig is
    not visible to the agent's hooks, and stays unset."""
    model = agent.model
    if isinstance(model, str):
        return model or None
    name = getattr(model, "model", None)
    return name if isinstance(name, str) and name else None


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and value > 0 else None
