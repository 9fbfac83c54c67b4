"""Run controls on an MCP server: a budget per run, escalation to a person, and undo.

Server and client in one process (the SDK's in-memory pair). The server limits each run to three
tool executions; one tool hands the run over to a person; the person then undoes the charges.
The client's `call_tool` raises the run's ending (`c4a.Escalated`, `c4a.BudgetExceeded`) as the
server reports it in an `isError` result.
"""

from __future__ import annotations

import uuid
from typing import Any

import anyio
from mcp import Client
from mcp.server.mcpserver import MCPServer

import call4agents as c4a
from call4agents_mcp import OnceOnly, call_tool

ledger = c4a.init()  # sqlite:///.c4a/ledger.db, or $CALL4AGENTS_URL
job = f"job-{uuid.uuid4().hex[:6]}"  # the caller; its actions are in run "mcp:<job>"
refunded: list[str] = []


def refund(charge: dict[str, Any], *, customer: str, amount: int) -> None:
    """The undo of `charge`: it gets what `charge` returned, and its arguments."""
    refunded.append(charge["charge_id"])  # your payment provider's refund call


server = MCPServer(
    "payments",
    middleware=[
        OnceOnly(
            identity=lambda ctx: job,  # in production: the authenticated client (the default)
            budget=c4a.Budget(max_tool_calls=3),
            tools={"charge": {"undo": refund}},
        )
    ],
)


@server.tool()
def charge(customer: str, amount: int) -> dict[str, Any]:
    """Charge a customer."""
    return {"charge_id": f"ch_{customer}_{amount}"}


@server.tool()
def credit(customer: str, amount: int) -> dict[str, Any]:
    """Give a customer a goodwill credit."""
    if amount > 100:
        c4a.escalate(
            "credits over 100 need a team lead",
            what_remains=[f"credit {customer} {amount} once a team lead approves"],
        )
    return {"credit_id": f"cr_{customer}"}


async def main() -> None:
    async with Client(server) as client, c4a.run(f"agent-{job}"):
        for customer in ("alice", "bob", "alice"):  # the second alice is a retry: free
            result = await call_tool(client, "charge", {"customer": customer, "amount": 20})
            print(f"charged: {(result.structured_content or {})['charge_id']}")
        try:
            await call_tool(client, "credit", {"customer": "carol", "amount": 500})
        except c4a.Escalated as e:
            print(f"escalated: {e.handoff.reason}")
            print(f"already done: {[d['external_ids'] for d in e.handoff.done]}")
        try:  # an agent that carries on regardless is stopped by the run's budget
            await call_tool(client, "charge", {"customer": "dave", "amount": 20})
        except c4a.BudgetExceeded as e:
            print(f"stopped: {e.reason} ({e.detail})")


anyio.run(main)
report = ledger.undo(f"mcp:{job}")  # the person reverses the run's charges, newest first
print(f"undo: {report.status}, refunded {refunded}")
