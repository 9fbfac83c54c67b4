"""A Pydantic AI agent whose tools run once per conversation, even when a resume replays them.

Offline: a scripted FunctionModel stands in for the LLM. Run it twice: the second process finds
conversation "ticket-1234" already emailed Bob, and sends nothing.
"""

from __future__ import annotations

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

import call4agents as c4a
from call4agents_pydantic_ai import OnceOnly

c4a.init()  # sqlite:///.c4a/ledger.db in the current folder, or $CALL4AGENTS_URL
outbox: list[str] = []


def send_email(to: str, body: str) -> str:
    """Email a customer."""
    outbox.append(to)  # stands in for a mail provider's API call
    return f"sent to {to} (idempotency key {c4a.current().idempotency_key[:12]}...)"


def llm(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    if messages[-1].parts[-1].part_kind == "tool-return":
        return ModelResponse(parts=[TextPart(f"Done: {messages[-1].parts[-1].content}")])
    email = {"to": "bob@example.com", "body": "Your refund is on its way"}
    return ModelResponse(parts=[ToolCallPart("send_email", email)])


agent = Agent(FunctionModel(llm), tools=[send_email], capabilities=[OnceOnly()])

result = agent.run_sync("Tell Bob about his refund", conversation_id="ticket-1234")
print(result.output)

# The process died after the email went out, before the app saved the tool's result: the saved
# history ends with the model's tool call, and Pydantic AI runs that call again on resume.
saved = result.all_messages()[:2]
resumed = agent.run_sync(message_history=saved)  # conversation_id comes back from the history
print(f"resumed: {resumed.output}")
print(f"emails sent by this process: {len(outbox)}")
