"""A child Pydantic AI agent for the crash tests: it emails, is SIGKILLed, and is resumed.

Usage: agent_child.py MODE CRASH DRIVER CONVERSATION WORKDIR

MODE is "plain" (no Call4Agents) or "ledger" (OnceOnly on the agent). The app saves the message
history to WORKDIR/history.json after every step, as a chat server would. CRASH picks the kill:
"after_tool" - the tool sent the email and returned, the next step has not saved the history;
"inside_tool" - the tool sent the email and the process died before it returned; "none".
A child that finds a saved history resumes from it with no new prompt, using DRIVER (iter, run,
run_sync or run_stream). Emails are lines in WORKDIR/outbox.jsonl, outside the ledger.
Env: TOOL=sync|async (default sync), CALLS=n parallel emails in one model turn (default 1).
Prints {"output": ..., "returns": [[tool, content, outcome], ...]} when the run ends.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from pydantic_ai import Agent, ModelRequestNode
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel

mode, crash, driver, conversation, workdir = sys.argv[1:6]
outbox = Path(workdir) / "outbox.jsonl"
history_file = Path(workdir) / "history.json"
calls = int(os.environ.get("CALLS", "1"))


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    if any(isinstance(p, UserPromptPart) for p in messages[-1].parts):
        return ModelResponse(
            parts=[
                ToolCallPart(
                    "send_email",
                    {"to": f"customer{i}@example.com", "body": "Your refund is on its way"},
                    tool_call_id=f"toolu_{i}",
                )
                for i in range(calls)
            ]
        )
    returns = [
        [p.tool_name, p.content, p.outcome]
        for p in messages[-1].parts
        if isinstance(p, ToolReturnPart)
    ]
    return ModelResponse(parts=[TextPart(json.dumps(returns))])


async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[Any]:
    for i, part in enumerate(respond(messages, info).parts):
        if isinstance(part, ToolCallPart):
            args = part.args_as_json_str()
            yield {
                i: DeltaToolCall(
                    name=part.tool_name, json_args=args, tool_call_id=part.tool_call_id
                )
            }
        elif isinstance(part, TextPart):
            yield part.content


def deliver(to: str) -> str:
    with outbox.open("a") as f:  # the outside world: one line per email
        f.write(json.dumps({"to": to, "pid": os.getpid()}) + "\n")
        f.flush()
        os.fsync(f.fileno())
    if crash == "inside_tool":
        die()  # sent, but the tool never returned
    return f"sent to {to}"


def send_email_sync(to: str, body: str) -> str:
    """Email a customer."""
    return deliver(to)


async def send_email_async(to: str, body: str) -> str:
    """Email a customer."""
    return deliver(to)


def build_agent() -> Agent[None, str]:
    tool = send_email_async if os.environ.get("TOOL") == "async" else send_email_sync
    capabilities = []
    if mode == "ledger":
        import call4agents as c4a
        from call4agents_pydantic_ai import OnceOnly

        c4a.init(os.environ["C4A_TEST_URL"], schema=os.environ.get("C4A_TEST_SCHEMA") or None)
        capabilities.append(OnceOnly())
    agent = Agent(FunctionModel(respond, stream_function=stream), capabilities=capabilities)
    agent.tool_plain(name="send_email")(tool)
    return agent


def save(messages: list[ModelMessage]) -> None:
    tmp = history_file.with_suffix(".tmp")
    tmp.write_bytes(ModelMessagesTypeAdapter.dump_json(messages))
    os.replace(tmp, history_file)


def has_tool_returns(node: object) -> bool:
    return isinstance(node, ModelRequestNode) and any(
        isinstance(p, ToolReturnPart) for p in node.request.parts
    )


async def first_turn(agent: Agent[None, str]) -> list[ModelMessage]:
    """The app's loop: one step at a time, saving the history after each."""
    async with agent.iter(
        "Tell the customers about their refunds", conversation_id=conversation
    ) as run:
        async for node in run:
            if crash == "after_tool" and has_tool_returns(node):
                die()  # the emails went out; the history with their results is not saved yet
            save(run.all_messages())
        assert run.result is not None
        return run.result.all_messages()


async def resume(agent: Agent[None, str], history: list[ModelMessage]) -> list[ModelMessage]:
    """A fresh process picks the conversation up from the saved history, with no new prompt."""
    if driver == "run":
        return (await agent.run(message_history=history)).all_messages()
    if driver == "run_stream":
        async with agent.run_stream(message_history=history) as streamed:
            await streamed.get_output()
            return streamed.all_messages()
    async with agent.iter(message_history=history) as run:
        async for _node in run:
            pass
        assert run.result is not None
        return run.result.all_messages()


def main() -> None:
    agent = build_agent()
    if not history_file.exists():
        messages = asyncio.run(first_turn(agent))
    else:
        history = ModelMessagesTypeAdapter.validate_json(history_file.read_bytes())
        if driver == "run_sync":
            messages = agent.run_sync(message_history=history).all_messages()
        else:
            messages = asyncio.run(resume(agent, history))
    save(messages)
    final = messages[-1]
    assert isinstance(final, ModelResponse)
    print(json.dumps({"output": final.text, "conversation": final.conversation_id}))


main()
