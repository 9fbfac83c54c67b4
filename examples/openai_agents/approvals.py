"""A refund needs a person's yes: an SDK interruption whose answer is recorded in the ledger.

The yes is bound to exactly the call that was shown (run, tool, arguments) and spent by one
execution, so two workers that both resume the same saved, approved state refund once.
"""

from __future__ import annotations

import asyncio
import uuid

from agents import Agent, Runner, RunState, function_tool, set_tracing_disabled
from agents.items import TResponseOutputItem
from agents.testing import ScriptedModel, assistant_message, function_call

import call4agents as c4a
from call4agents_openai_agents import OnceOnly

set_tracing_disabled(True)
ledger = c4a.init()
refunds: list[int] = []


@function_tool(needs_approval=True)
def refund(order: str, amount: int) -> str:
    """Refund an order."""
    refunds.append(amount)
    return f"refunded {amount} on order {order}"


def billing_agent(step: list[TResponseOutputItem]) -> Agent[dict[str, str]]:
    return Agent(name="billing", model=ScriptedModel([step]), tools=[refund])


async def main() -> None:
    once = OnceOnly()
    run_id = f"ticket-{uuid.uuid4().hex[:6]}"
    context = {"call4agents_run_id": run_id}  # saved with the RunState, so it survives a resume
    asked = function_call("refund", {"order": "A-77", "amount": 120}, call_id="call_R")
    agent = once.wrap(billing_agent([asked]))
    result = await Runner.run(agent, "Refund order A-77.", context=context)
    [item] = result.interruptions
    [ticket] = ledger.approvals(run_id, state="pending")
    print(f"paused: {item.tool_name}({item.arguments}) needs approval; ticket {ticket.ticket}")

    state = result.to_state()
    once.approve(state, item, by="ann", reason="customer called")
    saved = state.to_string()  # e.g. stored in a database, picked up by workers

    async def worker(name: str) -> None:
        resumed_agent = once.wrap(billing_agent([assistant_message("Refund issued.")]))
        resumed = await Runner.run(resumed_agent, await RunState.from_string(resumed_agent, saved))
        [out] = [i.output for i in resumed.new_items if i.type == "tool_call_output_item"]
        print(f"{name}: {out}")

    await asyncio.gather(worker("worker 1"), worker("worker 2"))
    [spent] = ledger.approvals(run_id)
    print(f"refunds actually made: {len(refunds)}; ticket {spent.state} by {spent.decided_by}")


asyncio.run(main())
