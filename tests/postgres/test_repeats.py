"""A repeat from a new process on PostgreSQL: a finished action is read, never written.

The table is held in EXCLUSIVE mode by another session, which lets plain reads through and stops
every insert, update and row lock (``SELECT ... FOR UPDATE``); the ledger under test gives up on
a lock after half a second. So a call that tries to write or lock fails with a LedgerError, and
one that only reads goes through.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
import pytest

import call4agents as c4a
from tests.conftest import Target


def impatient(target: Target) -> c4a.Ledger:
    """A new view of the ledger (an empty result cache, as in a new process) that fails a
    statement waiting over 0.5 s for a lock, instead of waiting.

    The ledger is made (or found made) by a patient view first, and the impatient one opens
    without migrating: opening takes the migration lock, which every ledger opening on the
    server takes, and under parallel load others' can hold it longer than 0.5 s."""
    target.open()
    ledger = c4a.Ledger(
        f"{target.url}?options=-c%20lock_timeout%3D500", schema=target.schema, auto_migrate=False
    )
    target.opened.append(ledger)
    return ledger


@contextmanager
def writes_blocked(target: Target) -> Iterator[None]:
    plain = target.url.replace("postgresql+psycopg://", "postgresql://", 1)
    with psycopg.connect(plain) as conn:  # a transaction, held until the block ends
        conn.execute(f'LOCK TABLE "{target.schema}".c4a_effects IN EXCLUSIVE MODE')
        yield


def test_a_finished_action_is_repeated_by_a_read_alone(pg_target: Target) -> None:
    ran: list[int] = []

    def send(n: int) -> dict[str, int]:
        ran.append(n)
        return {"sent": n}

    first = c4a.effect(name="repeat.send", ledger=pg_target.open())(send)
    with c4a.run("resumed"):
        assert first(1) == {"sent": 1}
    again = c4a.effect(name="repeat.send", ledger=impatient(pg_target))(send)
    with writes_blocked(pg_target), c4a.run("resumed"):
        assert again(1) == {"sent": 1}  # no insert attempted: it would wait for the lock
    assert ran == [1]


def test_only_the_insert_decides_a_run(pg_target: Target) -> None:
    # A read that finds nothing, or an attempt that failed, never starts the tool: both go on
    # to the insert (which the lock stops here), and run once it can write.
    ran: list[int] = []

    def send(n: int) -> dict[str, int]:
        ran.append(n)
        if len(ran) == 1:
            raise ConnectionError("provider refused: not sent")
        return {"sent": n}

    first = c4a.effect(name="repeat.flaky", ledger=pg_target.open())(send)
    with c4a.run("retried"), pytest.raises(ConnectionError):
        first(1)  # recorded as failed: a repeat runs it again
    again = c4a.effect(name="repeat.flaky", ledger=impatient(pg_target))(send)
    with c4a.run("retried"):
        with writes_blocked(pg_target):
            for n in (1, 2):  # the failed action, and one never seen
                with pytest.raises(c4a.LedgerError, match="lock"):
                    again(n)
        assert ran == [1]
        assert (again(1), again(2)) == ({"sent": 1}, {"sent": 2})
    assert ran == [1, 1, 2]
    assert [(r.state, r.attempt) for r in pg_target.open().effects("retried")] == [
        ("succeeded", 2),
        ("succeeded", 1),
    ]


def test_a_run_that_is_writing_goes_straight_to_the_insert(pg_target: Target) -> None:
    # Past its replay point a run meets new actions: after a claim that wrote an intent, the
    # next claim in that run skips the read (visible here because the lock stops the insert).
    ledger = impatient(pg_target)
    send = c4a.effect(name="repeat.live", ledger=ledger)(lambda n: {"sent": n})
    with c4a.run("live"):
        assert send(1) == {"sent": 1}
        ledger.recent.clear()  # served from the database, as in a process that never saw it
        with writes_blocked(pg_target), pytest.raises(c4a.LedgerError, match="lock"):
            send(1)
        assert send(1) == {"sent": 1}  # a repeat met: the next claims read first again
        ledger.recent.clear()
        with writes_blocked(pg_target):
            assert send(1) == {"sent": 1}


def test_a_gated_repeat_is_a_read_alone(pg_target: Target) -> None:
    # A tool that needs a yes, in a run with a budget: its repeat asks no gate (a recorded
    # action needs no new yes and spends no budget), so it too is answered by the read.
    ran: list[int] = []

    def wire(n: int) -> dict[str, int]:
        ran.append(n)
        return {"wired": n}

    ledger = pg_target.open()
    first = c4a.effect(name="repeat.wire", approval=True, ledger=ledger)(wire)
    budget = c4a.Budget(max_tool_calls=1)
    with c4a.run("gated", budget=budget):
        with pytest.raises(c4a.ApprovalRequired) as asked:
            first(1)
        ledger.approve(asked.value.request.ticket, by="ann")
        assert first(1) == {"wired": 1}
    again = c4a.effect(name="repeat.wire", approval=True, ledger=impatient(pg_target))(wire)
    with c4a.run("gated", budget=budget), writes_blocked(pg_target):
        assert again(1) == {"wired": 1}  # no gate asked: no row locked, nothing written
    assert ran == [1]
