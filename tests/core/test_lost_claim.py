"""A claim whose intent committed but whose answer was lost: the process that made it goes on.

On PostgreSQL a proxy cuts the real connection (tests/postgres/test_faults.py). SQLite has no
connection to cut (a commit is a call into the library), so here the store's claim commits and
then raises as a lost answer would, on both databases.
"""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

import call4agents as c4a
from call4agents.engine import _owner
from tests.conftest import Target


def lose_the_next_answer(ledger: c4a.Ledger) -> None:
    real = ledger.store.claim

    def claim(**given: Any) -> Any:
        ledger.store.claim = real  # type: ignore[method-assign]
        real(**given)
        raise c4a.LedgerError("the ledger database failed: server closed the connection")

    ledger.store.claim = claim  # type: ignore[method-assign]


def test_the_claiming_process_runs_its_own_intent_once(target: Target) -> None:
    ledger = target.open(wait=30.0)
    ran: list[int] = []
    entered, go = threading.Event(), threading.Event()

    @c4a.effect(name="pay", ledger=ledger)
    def pay(amount: int) -> str:
        ran.append(amount)
        entered.set()
        go.wait(30)
        return f"paid {amount}"

    def call() -> str:
        with c4a.run("lost", ledger=ledger):
            return pay(5)

    lose_the_next_answer(ledger)
    with pytest.raises(c4a.LedgerError):
        call()
    [record] = ledger.effects("lost")
    assert (record.state, ran) == ("started", [])
    assert ledger.in_doubt() == []  # its lease is live: a retry may still take it up
    with ThreadPoolExecutor(4) as pool:
        calls = [pool.submit(call) for _ in range(4)]
        assert entered.wait(30)
        go.set()
        assert [c.result() for c in calls] == ["paid 5"] * 4
    assert ran == [5]  # one of the four adopted the intent; the others waited for it
    [record] = ledger.effects("lost")
    assert (record.state, record.attempt) == ("succeeded", 1)


def test_an_intent_no_lost_claim_of_this_process_names_is_not_run(target: Target) -> None:
    # The intent names the claim of the process that wrote it: a process with no such lost
    # claim (here: this one, once it forgets) treats it as any other worker's.
    ledger = target.open(wait=0.2)
    ran: list[int] = []

    @c4a.effect(name="pay", ledger=ledger)
    def pay(amount: int) -> str:
        ran.append(amount)
        return f"paid {amount}"

    lose_the_next_answer(ledger)
    with c4a.run("lost", ledger=ledger):
        with pytest.raises(c4a.LedgerError):
            pay(5)
        _owner._unanswered.clear()
        with pytest.raises(c4a.EffectInDoubt, match="without recording an outcome"):
            pay(5)
    assert ran == []


def test_an_async_claim_cancelled_in_flight_leaves_no_live_owner(target: Target) -> None:
    # The task is cancelled while its claim is in a thread; the claim still lands. Nothing will
    # run it, and its process knows: the action is in doubt at once, not held by a live owner.
    ledger = target.open(lease=60.0, wait=0.5)
    real = ledger.store.claim
    entered, release = threading.Event(), threading.Event()
    ran: list[int] = []

    def slow(**given: Any) -> Any:
        ledger.store.claim = real  # type: ignore[method-assign]
        entered.set()
        release.wait(30)
        return real(**given)

    ledger.store.claim = slow  # type: ignore[method-assign]

    @c4a.effect(name="pay", ledger=ledger)
    async def pay(amount: int) -> str:
        ran.append(amount)
        return f"paid {amount}"

    async def cancelled() -> None:
        with c4a.run("cancelled", ledger=ledger):
            task = asyncio.ensure_future(pay(5))
            assert await asyncio.to_thread(entered.wait, 30)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        release.set()

    async def again() -> str:
        with c4a.run("cancelled", ledger=ledger):
            return await pay(5)

    asyncio.run(cancelled())  # waits for the claim's thread before it returns
    [record] = ledger.effects("cancelled")
    assert record.state == "started"
    with pytest.raises(c4a.EffectInDoubt, match="without recording an outcome"):
        asyncio.run(again())
    assert ran == []


def test_an_intent_no_retry_takes_up_is_judged_by_its_lease(target: Target) -> None:
    # Nothing renews it, so a process that never retries cannot hold the action forever.
    ledger = target.open(lease=0.5)

    @c4a.effect(name="pay", ledger=ledger)
    def pay(amount: int) -> str:
        return f"paid {amount}"

    lose_the_next_answer(ledger)
    with c4a.run("lost", ledger=ledger), pytest.raises(c4a.LedgerError):
        pay(5)
    [record] = ledger.effects("lost")
    deadline = time.monotonic() + 30
    while (row := ledger.store.get(record.key)) is not None and row.lease_live:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    [doubt] = ledger.in_doubt()
    assert doubt.note == "its lease expired with no result"
