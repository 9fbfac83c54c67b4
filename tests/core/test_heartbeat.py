"""The heartbeat thread renews the leases of running tools, and comes back however it ended."""

from __future__ import annotations

import time

import call4agents as c4a


def lease_of(ledger: c4a.Ledger, key: str) -> float:
    row = ledger.store.get(key)
    assert row is not None
    assert row.lease_expires_at is not None
    return row.lease_expires_at


def test_a_heartbeat_thread_that_ended_is_started_again_and_renews(ledger: c4a.Ledger) -> None:
    beat = ledger.heartbeat
    real_loop = beat._loop
    beat._loop = lambda: None  # type: ignore[method-assign]  # ends at once, as a fault would
    beat.hold("no-such-key", 1, 30.0, "owner")
    deadline = time.monotonic() + 10
    while beat._thread is not None:  # it says it has ended...
        assert time.monotonic() < deadline, "the ended thread is still named as running"
        time.sleep(0.01)
    beat.release("no-such-key")
    beat._loop = real_loop  # type: ignore[method-assign]
    renewed: list[bool] = []

    @c4a.effect(name="slow", ledger=ledger, lease=0.3)  # a renewal every 0.1 s
    def slow() -> str:
        key = c4a.current().key
        first = lease_of(ledger, key)
        until = time.monotonic() + 10
        while time.monotonic() < until and lease_of(ledger, key) <= first:
            time.sleep(0.02)
        renewed.append(lease_of(ledger, key) > first)
        return "done"

    with c4a.run("heartbeat-run", ledger=ledger):
        assert slow() == "done"  # ...so this call's hold started a new one
    assert renewed == [True]
