"""Run controls on an Agents SDK agent: a budget that ends the run, a hand-off, an undo.

Offline with the SDK's ScriptedModel, whose responses report token usage as a real model's do.

1. A budget of 5 model requests: past 80% the agent's instructions carry a wrap-up note, and the
   request after the fifth is never sent; the run ends with c4a.BudgetExceeded, recorded. The
   tokens each response reports are priced and counted against a cost ceiling too.
2. A tool escalates (a charge too large for an agent): the run ends with c4a.Escalated, whose
   hand-off lists exactly what was already done, with the ids the tools reported.
3. The run is undone: each charge is refunded once, newest first.
"""

from __future__ import annotations

import uuid
from typing import Any

from agents import Agent, Runner, Usage, function_tool, set_tracing_disabled
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call

import call4agents as c4a
from call4agents_openai_agents import OnceOnly

set_tracing_disabled(True)  # nothing leaves the machine
ledger = c4a.init()
refunds: list[str] = []


@function_tool
def send_update(to: str) -> str:
    """Send the customer an update."""
    return f"update sent to {to}"


def refund(result: dict[str, Any], *, customer: str, amount: int) -> None:
    refunds.append(result["charge_id"])  # your payment provider's refund, keyed by the charge


@function_tool
def charge(customer: str, amount: int) -> dict[str, Any]:
    """Charge a customer."""
    if amount > 100:
        c4a.escalate(
            "charges over 100 need a person",
            what_remains=[f"charge {customer} {amount} once approved"],
            blocking_fact=f"the charge is {amount}",
        )
    return {"charge_id": f"ch_{customer}_{amount}", "amount": amount}


def step(name: str, **arguments: Any) -> ModelStep:
    call = function_call(name, arguments, call_id=f"call_{uuid.uuid4().hex[:8]}")
    return ModelStep(output=[call], usage=Usage(requests=1, input_tokens=900, output_tokens=100))


budget = c4a.Budget(max_model_requests=5, max_cost=1.0, token_prices=(3.0, 15.0), soft=0.8)
once = OnceOnly(budget=budget, tools={"charge": {"undo": refund}})


def support_agent(model: ScriptedModel) -> Agent[Any]:
    agent = Agent(name="support", instructions="Help.", model=model, tools=[send_update, charge])
    return once.wrap(agent)


# 1. The budget: the model keeps sending updates until its sixth request is refused.
model = ScriptedModel([step("send_update", to=f"customer {n}") for n in range(1, 7)])
run_id = f"ticket-{uuid.uuid4().hex[:6]}"
try:
    Runner.run_sync(
        support_agent(model), "Keep them posted.", context={"call4agents_run_id": run_id}
    )
except c4a.BudgetExceeded as exc:
    print(f"budget: stopped by its {exc.reason} ({exc.detail}) after {len(model.calls)} requests")
noted = [c for c in model.calls if "Note from the run's budget" in (c.system_instructions or "")]
print(f"the model was told to wrap up in {len(noted)} request(s)")
with c4a.run(run_id, budget=budget):
    spent = c4a.budget_usage()
print(f"tokens {spent.input_tokens} in, {spent.output_tokens} out; cost {spent.cost:.4f}")
status = ledger.run_status(run_id)
assert status is not None
print(f"recorded ending: {status.status}")

# 2. Escalation from inside a tool, and 3. the undo of what was done.
model = ScriptedModel(
    [
        step("charge", customer="ann", amount=40),
        step("charge", customer="bob", amount=60),
        step("charge", customer="cat", amount=500),
        [assistant_message("never reached")],
    ]
)
order = f"order-{uuid.uuid4().hex[:6]}"
try:
    Runner.run_sync(support_agent(model), "Charge them.", context={"call4agents_run_id": order})
except c4a.Escalated as exc:
    print(f"escalated: {exc.handoff.reason}")
    for done in exc.handoff.done:
        print(f"  done: {done['tool']} {done['args']} ids {done['external_ids']}")
    for failed in exc.handoff.failed:
        print(f"  handed over: {failed['tool']} {failed['args']}")
report = ledger.undo(order)
print(f"undo: {report.status}; refunded {refunds}")
