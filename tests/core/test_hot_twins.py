"""The hot lane's hand-written statements do what their SQLAlchemy twins do, on both databases.

``storage/_hot.py`` writes the claim, the keyed reads, the outcome (with PostgreSQL's wake-up)
and the database clock by hand, for speed; ``storage/store.py`` states the same statements in
SQLAlchemy, and takes that path whenever someone listens to the engine. Two ledgers on one
database, one of them listened to, run the same steps on keys of their own: the answers and the
rows they leave must match, field for field (times within the steps' own duration).
"""

from __future__ import annotations

import time
from dataclasses import asdict
from typing import Any

import psycopg
import pytest
from sqlalchemy import event, make_url

from call4agents.storage import _pg
from call4agents.storage.store import Row, Store
from tests.conftest import Target

TTL = 30.0
CLOCK_SLACK = 5.0  # seconds: two reads of the clock, a few steps apart, on a loaded machine


def open_twins(target: Target) -> tuple[Store, Store]:
    hot, long = target.open(), target.open()
    event.listen(long.store.engine, "before_cursor_execute", lambda *args: None)
    assert hot.store._hot.usable
    assert not long.store._hot.usable
    return hot.store, long.store


@pytest.fixture
def twins(target: Target) -> tuple[Store, Store]:
    return open_twins(target)


def claim(store: Store, key: str, **changes: Any) -> Any:
    values: dict[str, Any] = {
        "key": key,
        "run_id": "twin-run",
        "tool": "send",
        "kind": "write",
        "args": '{"to": "bob"}',
        "owner": "owner-1",
        "ttl": TTL,
        "args_digest": "d" * 64,
    }
    return store.claim(**{**values, **changes})


def fields(row: Row | None) -> dict[str, Any]:
    """What must match between twins: everything but the key and the clock-made times."""
    assert row is not None
    found = asdict(row)
    for name in ("key", "lease_expires_at", "now"):
        found.pop(name)
    return found


def assert_twins(hot: Store, long: Store, k_hot: str, k_long: str) -> None:
    # Each row read both ways: the hot read and the SQLAlchemy read of one row agree...
    for key in (k_hot, k_long):
        assert fields(hot.get(key)) == fields(long.get(key))
    # ...and the two rows, written by the two lanes, agree with each other.
    a, b = long.get(k_hot), long.get(k_long)
    assert fields(a) == fields(b)
    assert a is not None
    assert b is not None
    if a.lease_expires_at is None:
        assert b.lease_expires_at is None
    else:
        assert b.lease_expires_at is not None
        assert abs((a.lease_expires_at - a.now) - (b.lease_expires_at - b.now)) < CLOCK_SLACK


def test_the_clock_is_the_same_clock(twins: tuple[Store, Store]) -> None:
    hot, long = twins
    assert claim(hot, "c" * 64).outcome == "run"
    by_hand, by_sqlalchemy = hot.get("c" * 64), long.get("c" * 64)
    assert by_hand is not None
    assert by_sqlalchemy is not None
    assert abs(by_hand.now - by_sqlalchemy.now) < CLOCK_SLACK
    assert abs(by_hand.now - long.now()) < CLOCK_SLACK
    assert abs(by_hand.now - time.time()) < 60  # seconds since the epoch, both ways
    assert by_hand.lease_expires_at is not None
    assert TTL - CLOCK_SLACK < by_hand.lease_expires_at - by_hand.now <= TTL + CLOCK_SLACK


def test_a_fresh_claim_then_a_second_claim(twins: tuple[Store, Store]) -> None:
    hot, long = twins
    k_hot, k_long = "a" * 64, "b" * 64
    first = claim(hot, k_hot), claim(long, k_long)
    assert [(c.outcome, c.attempt) for c in first] == [("run", 1), ("run", 1)]
    assert_twins(hot, long, k_hot, k_long)
    # The same action claimed again by another worker: the row that exists, not a new attempt.
    again = claim(hot, k_hot, owner="owner-2"), claim(long, k_long, owner="owner-2")
    assert [(c.outcome, c.attempt) for c in again] == [("existing", 1), ("existing", 1)]
    assert fields(again[0].row) == fields(again[1].row)
    assert again[0].row.owner == "owner-1"  # the first claim's lease holds


@pytest.mark.parametrize("state", ["succeeded", "failed", "in_doubt"])
def test_an_outcome_and_what_reads_it(twins: tuple[Store, Store], state: Any) -> None:
    hot, long = twins
    k_hot, k_long = "e" * 64, "f" * 64
    claim(hot, k_hot), claim(long, k_long)
    result = '{"id": "msg-1"}' if state == "succeeded" else None
    error = "TimeoutError: no answer" if state != "succeeded" else None
    done = [
        s.finish(k, 1, state=state, result=result, error=error, note="n")
        for s, k in ((hot, k_hot), (long, k_long))
    ]
    assert done == [True, True]
    assert_twins(hot, long, k_hot, k_long)
    # The keyed result read (a likely repeat's) gives what the row holds, and only a success.
    expected = result if state == "succeeded" else None
    assert hot.recorded(k_hot) == expected
    long_row = long.get(k_long)
    assert long_row is not None
    assert (long_row.result if long_row.state == "succeeded" else None) == expected
    # A late outcome of the same attempt is fenced off both ways once the action is closed.
    if state != "in_doubt":
        late = [
            s.finish(k, 1, state="failed", error="late") for s, k in ((hot, k_hot), (long, k_long))
        ]
        assert late[0] == late[1]
        assert_twins(hot, long, k_hot, k_long)


def test_a_failed_action_is_claimed_again_as_its_next_attempt(twins: tuple[Store, Store]) -> None:
    hot, long = twins
    k_hot, k_long = "1" * 64, "2" * 64
    for store, key in ((hot, k_hot), (long, k_long)):
        claim(store, key)
        store.finish(key, 1, state="failed", error="ValueError: bad")
    again = claim(hot, k_hot, owner="owner-2"), claim(long, k_long, owner="owner-2")
    assert [(c.outcome, c.attempt) for c in again] == [("run", 2), ("run", 2)]
    assert_twins(hot, long, k_hot, k_long)


def test_an_outcome_wakes_a_waiter_both_ways(pg_target: Target) -> None:
    """PostgreSQL: a finisher notifies exactly when a waiter holds the key's shared lock (SQLite
    waiters poll the file)."""
    hot, long = open_twins(pg_target)
    target = pg_target
    url = make_url(target.url).set(drivername="postgresql")
    with psycopg.connect(url.render_as_string(hide_password=False), autocommit=True) as waiter:
        waiter.execute(f"LISTEN {_pg.channel_for(target.schema)}")
        for store, key in ((hot, "w" * 64), (long, "x" * 64)):
            claim(store, key)
            lock = _pg.lock_id(target.schema, key)
            waiter.execute("SELECT pg_advisory_lock_shared(%s, %s)", (_pg.LOCK_CLASS, lock))
            assert store.finish(key, 1, state="succeeded", result="1")
            waiter.execute("SELECT pg_advisory_unlock_shared(%s, %s)", (_pg.LOCK_CLASS, lock))
            woken = [n.payload for n in waiter.notifies(timeout=5, stop_after=1)]
            assert woken == [key]
        # With nobody waiting, neither lane notifies.
        for store, key in ((hot, "y" * 64), (long, "z" * 64)):
            claim(store, key)
            assert store.finish(key, 1, state="succeeded", result="1")
        assert list(waiter.notifies(timeout=1)) == []
