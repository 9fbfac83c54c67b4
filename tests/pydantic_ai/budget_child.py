"""A child Pydantic AI agent under a budget, SIGKILLed mid-conversation and then resumed.

Usage: budget_child.py CONVERSATION WORKDIR [kill_after_N]

The agent has ``OnceOnly(budget=Budget(max_tool_calls=3))`` and a model that emails one more
customer at every step, for ever: only the budget stops it. The app saves the message history
after every step. ``kill_after_N`` SIGKILLs the process once N emails went out, before the
history holding the N-th result is saved; a child that finds a saved history resumes from it.
Every model response reports 100 input and 10 output tokens. Emails are lines in
WORKDIR/outbox.jsonl, outside the ledger. Prints {"ended": reason or null} as the run ends.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path

from pydantic_ai import Agent, ModelRequestNode
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelResponse,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage

import call4agents as c4a
from call4agents_pydantic_ai import OnceOnly

conversation, workdir = sys.argv[1], Path(sys.argv[2])
kill_after = int(sys.argv[3].removeprefix("kill_after_")) if len(sys.argv) > 3 else None
outbox = workdir / "outbox.jsonl"
history_file = workdir / "history.json"


def emails() -> int:
    return len(outbox.read_text().splitlines()) if outbox.exists() else 0


def send_email(to: str) -> str:
    """Email a customer."""
    with outbox.open("a") as f:
        f.write(json.dumps({"to": to}) + "\n")
        f.flush()
        os.fsync(f.fileno())
    return f"sent to {to}"


def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    n = sum(isinstance(m, ModelResponse) for m in messages)
    call = ToolCallPart("send_email", {"to": f"u{n}@example.com"}, tool_call_id=f"call-{n}")
    return ModelResponse(parts=[call], usage=RequestUsage(input_tokens=100, output_tokens=10))


def save(messages: list[ModelMessage]) -> None:
    tmp = history_file.with_suffix(".tmp")
    tmp.write_bytes(ModelMessagesTypeAdapter.dump_json(messages))
    os.replace(tmp, history_file)


async def main() -> None:
    c4a.init(os.environ["C4A_TEST_URL"], schema=os.environ.get("C4A_TEST_SCHEMA") or None)
    budget = c4a.Budget(max_tool_calls=3)
    once = OnceOnly(budget=budget)
    agent = Agent(FunctionModel(respond), tools=[send_email], capabilities=[once])
    history = (
        ModelMessagesTypeAdapter.validate_json(history_file.read_bytes())
        if history_file.exists()
        else None
    )
    prompt = None if history else "Email every customer"
    try:
        async with agent.iter(prompt, message_history=history, conversation_id=conversation) as run:
            async for node in run:
                returns = isinstance(node, ModelRequestNode) and any(
                    isinstance(p, ToolReturnPart) for p in node.request.parts
                )
                if returns and emails() == kill_after:
                    os.kill(os.getpid(), signal.SIGKILL)  # sent; its result not saved yet
                save(run.all_messages())
    except c4a.BudgetExceeded as exc:
        print(json.dumps({"ended": exc.reason}))
        return
    print(json.dumps({"ended": None}))


asyncio.run(main())
