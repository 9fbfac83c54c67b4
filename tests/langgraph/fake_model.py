"""An offline chat model for the LangGraph tests: its answer is a pure function of the messages.

A model that pops the next canned reply would drift when LangGraph re-runs a node on resume;
this one gives the same tool calls for the same conversation, like a deterministic real model.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import Field


class ScriptedModel(BaseChatModel):
    """After a human message: call ``tool_calls`` (name, args) in one turn. After tool results:
    answer with the results' text."""

    tool_calls: list[tuple[str, dict[str, Any]]] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "scripted-tool-model"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedModel:
        return self

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        turn = sum(isinstance(m, HumanMessage) for m in messages)
        if isinstance(messages[-1], HumanMessage):
            calls = [
                {"name": name, "args": args, "id": f"call_{name}_{turn}_{i}", "type": "tool_call"}
                for i, (name, args) in enumerate(self.tool_calls)
            ]
            reply = AIMessage(content="", tool_calls=calls)
        else:
            results = [
                f"{m.name}:{m.status}:{m.content}" for m in messages if isinstance(m, ToolMessage)
            ]
            reply = AIMessage(content="done: " + " | ".join(results))
        return ChatResult(generations=[ChatGeneration(message=reply)])


class StepModel(BaseChatModel):
    """One tool call per turn: ``calls[n]`` once the conversation holds n tool results, then a
    final answer. Like ScriptedModel it answers the same conversation the same way, so a resume
    gets the same calls (with the same ids). Each reply reports ``usage`` tokens, and every
    request's messages are kept in ``seen``, to check what the model was shown."""

    calls: list[tuple[str, dict[str, Any]]] = Field(default_factory=list)
    usage: tuple[int, int] | None = None
    seen: list[list[BaseMessage]] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "step-tool-model"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> StepModel:
        return self

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        self.seen.append(list(messages))
        done = sum(isinstance(m, ToolMessage) for m in messages)
        if done < len(self.calls):
            name, args = self.calls[done]
            call = {"name": name, "args": args, "id": f"call_{done}", "type": "tool_call"}
            reply = AIMessage(content="", tool_calls=[call])
        else:
            reply = AIMessage(content=f"done after {done} tool calls")
        if self.usage is not None:
            tokens_in, tokens_out = self.usage
            reply.usage_metadata = {
                "input_tokens": tokens_in,
                "output_tokens": tokens_out,
                "total_tokens": tokens_in + tokens_out,
            }
        return ChatResult(generations=[ChatGeneration(message=reply)])

    def system_texts(self) -> list[str]:
        """The system message of each request, in order ("" when there was none)."""
        return [
            str(m[0].content) if m and isinstance(m[0], SystemMessage) else "" for m in self.seen
        ]
