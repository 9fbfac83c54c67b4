"""Settling doubt without a person: a provider that drops duplicates, or a reconciler.

`retry_in_doubt=True` re-sends an in-doubt call with the same idempotency key, which is safe only
because the provider drops a key it has seen. `check=` asks the provider what happened.
"""

from __future__ import annotations

import uuid

import call4agents as c4a


class Provider:
    """A payment API like Stripe's: the same Idempotency-Key twice creates one charge."""

    def __init__(self) -> None:
        self.charges: dict[str, str] = {}
        self.drop_next_answer = True

    def charge(self, amount: int, idempotency_key: str) -> str:
        charge_id = self.charges.setdefault(idempotency_key, f"ch_{len(self.charges) + 1}")
        if self.drop_next_answer:  # the charge happened, but the answer is lost on the way back
            self.drop_next_answer = False
            raise TimeoutError("read timed out")
        return charge_id

    def find(self, idempotency_key: str) -> str | None:
        return self.charges.get(idempotency_key)


c4a.init()
stripe_like = Provider()


@c4a.effect(retry_in_doubt=True)
def charge(amount: int) -> str:
    return stripe_like.charge(amount, idempotency_key=c4a.current().idempotency_key)


def look_up(amount: int) -> c4a.Happened | c4a.DidNotHappen | None:
    found = stripe_like.find(c4a.current().idempotency_key)
    return c4a.Happened(found) if found else c4a.DidNotHappen()


@c4a.effect(check=look_up)
def charge_checked(amount: int) -> str:
    return stripe_like.charge(amount, idempotency_key=c4a.current().idempotency_key)


with c4a.run(f"order-{uuid.uuid4().hex[:6]}"):
    try:
        charge(500)
    except TimeoutError:
        print("charge(500) timed out: in doubt")
    charge_id, count = charge(500), len(stripe_like.charges)
    print(f"retried with the same key: {charge_id}; charges at the provider: {count}")

    stripe_like.drop_next_answer = True
    try:
        charge_checked(700)
    except TimeoutError:
        print("charge_checked(700) timed out: in doubt")
    print(f"the reconciler found it: {charge_checked(700)}; charges: {len(stripe_like.charges)}")
