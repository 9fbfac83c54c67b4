"""Run controls: undo a run, read-before-write for an API with no idempotency key, escalate,
and a budget counted in the ledger.

Each part uses its own run id with a random suffix, so the example can run again and again.
"""

from __future__ import annotations

import os
import sys
import uuid
from pathlib import Path
from typing import Any

import call4agents as c4a

ledger = c4a.init()  # sqlite:///.c4a/ledger.db in the current folder, or $CALL4AGENTS_URL
suffix = uuid.uuid4().hex[:6]
payments: dict[str, int] = {}  # stands in for a payment provider
tickets: list[dict[str, str]] = []  # stands in for an issue tracker that takes no key


# -- undo: how to reverse a charge, registered with the tool ----------------------------------


def refund(result: dict[str, Any], *, customer: str, amount: int) -> str:
    """Called as undo(recorded result, **recorded arguments), once, however often undo runs."""
    payments.pop(result["charge_id"])
    return f"refunded {amount} to {customer}"


@c4a.effect(undo=refund)
def charge(customer: str, amount: int) -> dict[str, Any]:
    charge_id = f"ch_{len(payments) + 1}"
    payments[charge_id] = amount
    return {"charge_id": charge_id, "amount": amount}


@c4a.effect  # no undo=: undo reports it by name rather than skipping it
def post_to_slack(text: str) -> str:
    return "posted"


run_id = f"order-{suffix}"
with c4a.run(run_id):
    charge("alice", 30)
    charge("bob", 12)
    post_to_slack("two customers charged")
print(f"charged: {sorted(payments.values())}")

report = ledger.undo(run_id)  # newest first; the CLI is `call4agents undo RUN`
for item in report.items:
    print(f"undo {item.tool}: {item.outcome} ({item.detail})")
print(f"run is {report.status}; charges left: {len(payments)}")
again = ledger.undo(run_id)  # nothing is reversed twice
print(f"second undo: {[i.outcome for i in again.items]}")


# -- read-before-write: plant the key, look for it first ----------------------------------------


def find_ticket(title: str) -> dict[str, str] | None:
    # Search the tracker for this action's marker; what is found becomes the recorded result.
    return c4a.find_marked(tickets, lambda t: t["title"])


@c4a.effect(find_existing=find_ticket)
def open_ticket(title: str) -> dict[str, str]:
    ticket = {"id": f"T-{len(tickets) + 1}", "title": f"{title} {c4a.key_marker()}"}
    tickets.append(ticket)
    raise TimeoutError("the tracker created it, but its answer was lost")


with c4a.run(f"support-{suffix}"):
    try:
        open_ticket("Printer on fire")
    except TimeoutError:
        print("open_ticket timed out: in doubt")
    found = open_ticket("Printer on fire")  # the finder finds the ticket: no second one
    print(f"found {found['id']} instead of opening another; tickets: {len(tickets)}")


# -- escalation: a legitimate ending with a hand-off -------------------------------------------

try:
    with c4a.run(f"refund-{suffix}"):
        charge("carol", 500)
        c4a.escalate(
            "refunds over 100 need a person",
            what_remains=["refund 500 to carol once approved"],
            blocking_fact="carol's refund is 500",
        )
except c4a.Escalated as escalated:  # hand this to a ticketing system: .as_dict() is JSON-ready
    handoff = escalated.handoff
    print(f"escalated: {handoff.reason}")
    print(f"done: {[(d['tool'], d['external_ids']) for d in handoff.done]}")
    print(f"what remains: {handoff.what_remains}")
    # The command installed beside this Python (.venv/bin/call4agents after scripts/quickstart).
    cli = os.path.relpath(Path(sys.executable).with_name("call4agents"))
    print(f"see it with: {cli} show {handoff.run_id}")


# -- budgets: limits counted in the ledger, so a resume continues the count ---------------------


@c4a.effect
def send_sms(to: str, text: str) -> str:
    return f"sent to {to}"


updates = f"updates-{suffix}"
budget = c4a.Budget(max_calls_per_tool=3, deadline=600, soft=0.6)
with c4a.run(updates, budget=budget):
    try:
        for n in range(5):
            send_sms("+15550100", f"update {n}")
            if c4a.budget_usage().soft_reached:  # time to tell the agent to wrap up
                print(f"soft limit reached after {n + 1} messages")
    except c4a.BudgetExceeded as exc:
        print(f"stopped before message {n + 1}: {exc.reason} ({exc.detail})")

with c4a.run(updates, budget=budget):  # the run resumed (a new process would see the same)
    send_sms("+15550100", "update 0")  # a repeat is served from the ledger: it costs nothing
    try:
        send_sms("+15550100", "update 9")
    except c4a.BudgetExceeded:
        print("after the resume: still refused, the count is in the ledger")
status = ledger.run_status(updates)
assert status is not None
print(f"run {updates} ended: {status.status}")
