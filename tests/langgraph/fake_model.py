"""An offline chat model for the LangGraph tests: its answer is a pure function of the messages.

A model that pops the next canned reply would drift when LangGraph re-runs a node on resume;
this one gives the same tool calls for the same conversation, like a deterministic real model.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
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
