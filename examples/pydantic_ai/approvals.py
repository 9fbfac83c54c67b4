"""A person's "yes" through Pydantic AI's deferred tools, bound to the exact call that runs.

The run stops with DeferredToolRequests carrying the ledger's ticket for the exact call. The yes
is recorded in the ledger: the same continuation sent twice refunds once, and a history edited
after the question runs nothing and asks again. Offline: a scripted FunctionModel.
"""

from __future__ import annotations

import uuid
from dataclasses import replace

from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults, ToolApproved
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

import call4agents as c4a
from call4agents_pydantic_ai import OnceOnly

ledger = c4a.init()
batch = uuid.uuid4().hex[:6]  # fresh conversations each time the example runs
refunds: list[tuple[str, int]] = []


def refund(order: str, amount: int) -> str:
    """Refund an order, in euro."""
    refunds.append((order, amount))
    return f"refunded {amount} EUR on {order}"


def llm(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    if messages[-1].parts[-1].part_kind == "tool-return":
        return ModelResponse(parts=[TextPart(f"Done: {messages[-1].parts[-1].content}")])
    return ModelResponse(parts=[ToolCallPart("refund", {"order": "A-17", "amount": 120})])


agent = Agent(
    FunctionModel(llm),
    tools=[refund],
    output_type=[str, DeferredToolRequests],  # lets a run end with questions for a person
    capabilities=[OnceOnly(tools={"refund": {"approval": True}})],
)


def ask(conversation: str) -> tuple[DeferredToolRequests, list[ModelMessage]]:
    result = agent.run_sync("Refund order A-17", conversation_id=conversation)
    assert isinstance(result.output, DeferredToolRequests)
    return result.output, result.all_messages()


def yes(
    requests: DeferredToolRequests, decision: bool | ToolApproved = True
) -> DeferredToolResults:
    ids = [call.tool_call_id for call in requests.approvals]
    return DeferredToolResults(
        approvals=dict.fromkeys(ids, decision),
        metadata=requests.metadata,  # echo the tickets back: the yes goes to what was shown
        answered_by=dict.fromkeys(ids, "ann@shop.example"),
    )


requests, history = ask(f"ticket-77-{batch}")
[call] = requests.approvals
shown = requests.metadata[call.tool_call_id]["call4agents"]
print(f"needs approval: {shown['tool']} {shown['args']} (ticket {shown['ticket']})")

answer = yes(requests)
print(agent.run_sync(message_history=history, deferred_tool_results=answer).output)
# The same continuation again (a retried request, a second worker): the recorded result.
print(agent.run_sync(message_history=history, deferred_tool_results=answer).output)

# An approver may edit the call; the yes is for the edited call.
requests, history = ask(f"ticket-78-{batch}")
edited = yes(requests, ToolApproved(override_args={"order": "A-17", "amount": 100}))
print(agent.run_sync(message_history=history, deferred_tool_results=edited).output)

# The saved history is edited after the question to refund far more: nothing runs.
requests, history = ask(f"ticket-79-{batch}")
tampered = [
    replace(m, parts=[replace(p, args={"order": "A-17", "amount": 5000}) for p in m.parts])
    if isinstance(m, ModelResponse)
    else m
    for m in history
]
again = agent.run_sync(message_history=tampered, deferred_tool_results=yes(requests)).output
assert isinstance(again, DeferredToolRequests)
print(f"edited history: asked again for {again.approvals[0].args}")

print(f"refunds made: {refunds}")
for ticket in ledger.approvals(run_id=f"ticket-77-{batch}"):
    print(f"ticket {ticket.ticket}: {ticket.state} by {ticket.decided_by}")
