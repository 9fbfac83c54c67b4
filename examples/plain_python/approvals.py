"""A person's "yes" covers exactly the call that was shown, once.

The agent asks to pay 10 to alice; a person approves that ticket. Paying 9999 to mallory is a
different action and needs its own yes; repeating the approved payment returns its result.
"""

from __future__ import annotations

import os
import uuid

import call4agents as c4a

os.environ.setdefault("CALL4AGENTS_SECRET", "example-only-secret-" + "x" * 32)
ledger = c4a.init()
paid: list[tuple[int, str]] = []


@c4a.effect(kind="irreversible", approval=True, redact=("card",))
def pay(amount: int, to: str, card: str) -> str:
    paid.append((amount, to))
    return f"paid {amount} to {to}"


def ask(amount: int, to: str) -> c4a.ApprovalRequest:
    try:
        pay(amount, to, card="4242-4242-4242-4242")
    except c4a.ApprovalRequired as exc:
        return exc.request
    raise AssertionError("expected the call to need approval")


with c4a.run(f"refund-{uuid.uuid4().hex[:6]}"):
    request = ask(10, "alice")
    print(f"asked: {request.tool}({request.args}) ticket {request.ticket}")
    ledger.approve(
        request.ticket, by="ann", reason="refund for order 77"
    )  # or: call4agents approve
    print(pay(10, "alice", card="4242-4242-4242-4242"))
    print(pay(10, "alice", card="4242-4242-4242-4242"), "(a repeat: recorded result)")

    other = ask(9999, "mallory")
    print(f"pay(9999, mallory) is another action: new ticket {other.ticket}, nothing ran")
    ledger.deny(other.ticket, by="ann", reason="not a customer")
    try:
        pay(9999, "mallory", card="4242-4242-4242-4242")
    except c4a.ApprovalDenied as exc:
        print(f"denied: {exc.reason}")

print(f"payments made: {paid}")
