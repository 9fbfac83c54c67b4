"""Run controls on a Pydantic AI agent: a budget that ends the run, escalation, then undo.

Offline: Pydantic AI's FunctionModel stands in for the LLM and reports token usage the way a
provider does. Each part uses a fresh conversation id, so the example can run again and again.
"""

from __future__ import annotations

import os
import sys
import uuid
from pathlib import Path

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage

import call4agents as c4a
from call4agents_pydantic_ai import OnceOnly

ledger = c4a.init()  # sqlite:///.c4a/ledger.db in the current folder, or $CALL4AGENTS_URL
suffix = uuid.uuid4().hex[:6]
outbox: list[str] = []  # stands in for a mail provider
recalled: list[str] = []


def recall(result: dict[str, str], *, to: str, body: str) -> None:
    """How to reverse an email: called as undo(recorded result, **recorded arguments)."""
    recalled.append(result["message_id"])


def send_email(to: str, body: str) -> dict[str, str]:
    """Email a customer."""
    outbox.append(to)
    return {"message_id": f"msg-{suffix}-{len(outbox)}"}


def refund(order: str, amount: int) -> dict[str, str]:
    """Refund an order."""
    if amount > 100:  # the agent's own limit: hand over to a person, do not act
        c4a.escalate(
            "refunds over 100 need a person",
            what_remains=[f"refund {amount} on {order} once approved"],
            blocking_fact=f"the refund is {amount}",
        )
    return {"refund_id": f"re_{order}"}


# -- 1. a budget: the model emails one more customer at every step, until the budget stops it --

told: list[str] = []


def chatty(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    if info.instructions and "Note from the run's budget" in info.instructions:
        told.append(info.instructions)  # what OnceOnly adds past the soft threshold
    n = sum(isinstance(m, ModelResponse) for m in messages)
    email = {"to": f"customer{n}@example.com", "body": "Your order shipped"}
    usage = RequestUsage(input_tokens=1000, output_tokens=200)  # as a provider reports it
    return ModelResponse(parts=[ToolCallPart("send_email", email)], usage=usage)


budget = c4a.Budget(max_model_requests=5, max_cost=1.0, token_prices=(3.0, 15.0), soft=0.8)
agent = Agent(FunctionModel(chatty), tools=[send_email], capabilities=[OnceOnly(budget=budget)])
conversation = f"newsletter-{suffix}"
try:
    agent.run_sync("Tell every customer their order shipped", conversation_id=conversation)
except c4a.BudgetExceeded as exc:  # raised out of the run, like Pydantic AI's own limits
    print(f"budget: stopped by {exc.reason} ({exc.detail}) after {len(outbox)} emails")
print(f"the model was told {len(told)} times: {told[0].splitlines()[-1]}")
with c4a.run(conversation, budget=budget):
    spent = c4a.budget_usage()  # counted in the ledger: a resume continues from here
requests, tokens = spent.model_requests, spent.input_tokens
print(f"spent: {requests} requests, {tokens} tokens in, cost {spent.cost:.3f}")


# -- 2. escalation from inside a tool, then undo by the person who takes over ---------------


def handler(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    if len(messages) > 1:
        return ModelResponse(parts=[TextPart("done")])
    email = {"to": "bob@example.com", "body": "About your refund"}
    return ModelResponse(
        parts=[
            ToolCallPart("send_email", email),
            ToolCallPart("refund", {"order": "A-17", "amount": 500}),
        ]
    )


once = OnceOnly(tools={"send_email": {"undo": recall}})
agent = Agent(FunctionModel(handler), tools=[send_email, refund], capabilities=[once])
ticket = f"ticket-{suffix}"
try:
    agent.run_sync("Bob wants his 500 back", conversation_id=ticket)
except c4a.Escalated as exc:  # the run ended: the model never saw it as a tool error
    handoff = exc.handoff
    print(f"escalated: {handoff.reason}")
    print(f"done: {[(d['tool'], d['args']['to']) for d in handoff.done]}")
    # The command installed beside this Python (.venv/bin/call4agents after scripts/quickstart).
    cli = os.path.relpath(Path(sys.executable).with_name("call4agents"))
    print(f"remains: {handoff.what_remains}; `{cli} show {ticket}` prints it all")

report = ledger.undo(ticket)  # the person reverses what the agent did, newest first
print(f"undo: {report.status}; recalled {len(recalled)} email(s)")
