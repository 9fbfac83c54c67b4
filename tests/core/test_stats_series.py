"""The health figures over time (``stats.series``), as the console charts them, on both backends."""

from __future__ import annotations

from typing import Any

import pytest

import call4agents as c4a
from call4agents.controls import stats


def _ask_then_run_without_the_yes(ledger: c4a.Ledger) -> str:
    """A tool asks for a yes; then, its approval= removed, the same call runs without one."""

    @c4a.effect(name="wire", kind="irreversible", approval=True, ledger=ledger)
    def asking(amount: int) -> str:
        return f"sent {amount}"

    @c4a.effect(name="wire", kind="irreversible", approval=False, ledger=ledger)
    def not_asking(amount: int) -> str:
        return f"sent {amount}"

    with c4a.run("careless"), pytest.raises(c4a.ApprovalRequired) as info:
        asking(900)
    with c4a.run("careless"):
        not_asking(900)
    return info.value.request.ticket


def _note_then_escalate(note: Any) -> None:
    note("D-4")
    c4a.escalate("needs a person")


def test_series_counts_each_figure_in_its_bucket(ledger: c4a.Ledger) -> None:
    @c4a.effect(name="refund", kind="irreversible", approval=True)
    def refund(order: str) -> str:
        return f"refunded {order}"

    @c4a.effect(name="note", kind="write")
    def note(order: str) -> str:
        return order

    with c4a.run("approved"), pytest.raises(c4a.ApprovalRequired) as info:
        refund("A-1")
    ledger.approve(info.value.request.ticket, by="ann")
    with c4a.run("approved"):
        assert refund("A-1") == "refunded A-1"
    with c4a.run("waiting"), pytest.raises(c4a.ApprovalRequired):
        refund("B-2")
    budget = c4a.Budget(max_cost=10.0)
    with c4a.run("costly", budget=budget):
        note("C-3")
        c4a.record_model_usage(cost=0.2537)  # charted to two significant figures, as stats gives it
    with pytest.raises(c4a.Escalated), c4a.run("handed-over"):
        _note_then_escalate(note)
    before = stats.series(ledger, 3600, 12)
    assert before.unapproved_executions == 0  # every approval-required run had its yes

    _ask_then_run_without_the_yes(ledger)
    found = stats.series(ledger, 3600, 12)
    assert len(found.buckets) == 12
    assert found.bucket_seconds == pytest.approx(300)
    last = found.buckets[-1]
    assert sum(b.irreversible_executions for b in found.buckets) == 2  # refund A-1, the wire
    assert found.unapproved_executions == 1
    assert stats.unapproved_executions(ledger) == 1
    assert stats.unapproved_executions(ledger, 3600) == 1
    assert last.approvals_waiting == 2  # B-2's ticket, and the wire's, which nobody answered
    assert last.approvals_oldest_age is not None
    assert last.escalations_open == 1
    assert last.escalations_oldest_age is not None
    assert sum(b.runs_ended.get("escalated", 0) for b in found.buckets) == 1
    assert sum(b.runs_ended.get("completed", 0) for b in found.buckets) >= 1
    assert [b.cost_per_run_p95 for b in found.buckets if b.cost_per_run_p95] == [0.25]
    assert [b.cost_per_run_p99 for b in found.buckets if b.cost_per_run_p99] == [0.25]
    assert last.in_doubt_open == 0
    assert all(b.end > b.start for b in found.buckets)


def test_in_doubt_and_repeats_over_time(ledger: c4a.Ledger) -> None:
    @c4a.effect(name="send", kind="write")
    def send(to: str) -> str:
        raise TimeoutError("no answer")

    @c4a.effect(name="tag", kind="write")
    def tag(x: int) -> int:
        return x

    with c4a.run("r"), pytest.raises(TimeoutError):
        send("bob")
    with c4a.run("r"):
        tag(1)
        tag(1)  # served from the record
    ledger.dedup.flush()  # repeats are counted in memory and written every few seconds
    found = stats.series(ledger, 3600, 6)
    assert found.buckets[-1].in_doubt_open == 1
    assert found.buckets[0].in_doubt_open == 0  # it fell in doubt in the last bucket
    assert sum(b.executions for b in found.buckets) == 2  # send once, tag once
    assert sum(b.deduped for b in found.buckets) == 1
    assert found.buckets[-1].dedup_rate == pytest.approx(1 / 3)


def test_series_refuses_an_empty_window(ledger: c4a.Ledger) -> None:
    with pytest.raises(ValueError, match="window over 0 seconds"):
        stats.series(ledger, 0)


def test_tickets_waiting_at_each_end_equal_a_count_of_every_ticket(ledger: c4a.Ledger) -> None:
    # Tickets asked, decided and expiring at times that fall in the buckets and exactly on
    # their ends: the chart counts, at each end, the tickets asked at or before it and still
    # waiting after it (neither decided nor expired), and the oldest of them, as a count of
    # every ticket says. The database groups the tickets; a ticket asked on an end is counted
    # as Python's bisect_left counts it.
    from sqlalchemy import insert

    from call4agents.storage.tables import approvals

    last = -(-ledger.store.now() // 60) * 60
    edges = [last - (12 - i) * 300 for i in range(13)]  # an hour in 12 buckets of 5 minutes
    times = sorted({*edges, *(e + 17.5 for e in edges), *(e - 0.25 for e in edges)})
    rows = []
    for i, asked in enumerate(times[:-3]):
        until = times[min(len(times) - 1, i + 1 + i % 7)]
        decided = until if i % 3 else None  # a third never decided: they wait until they expire
        rows.append(
            {
                "ticket": f"apr_t{i:04d}",
                "key": f"{i:064d}",
                "for_attempt": 1,
                "run_id": f"r{i}",
                "tool": "t",
                "args": "{}",
                "state": "pending" if decided is None else ("approved", "denied")[i % 2],
                "requested_at": asked - 7200 * (i % 5 == 0),  # some asked before the window
                "expires_at": until if decided is None else until + 900,
                "decided_at": decided,
                "signature": "s",
            }
        )
    with ledger.engine.begin() as conn:
        conn.execute(insert(approvals), rows)
    found = stats.series(ledger, 3600, 12)
    assert [b.start for b in found.buckets] == edges[:-1]  # the clock did not pass a minute
    for bucket in found.buckets:
        waiting = [
            r["requested_at"]
            for r in rows
            if r["requested_at"]
            <= bucket.end
            < min(r["expires_at"], r["decided_at"] or r["expires_at"])
            and r["expires_at"] > edges[0]
        ]
        assert bucket.approvals_waiting == len(waiting), bucket
        expected = None if not waiting else bucket.end - min(waiting)
        assert bucket.approvals_oldest_age == pytest.approx(expected), bucket


def test_one_pass_finds_what_the_all_time_and_window_checks_find(ledger: c4a.Ledger) -> None:
    """The all-time health page counts actions executed without a yes, over all time and for
    the last week's chart, in one pass (``unapproved_ever_and_since``): it must find what the
    two checks find apart, whatever the tickets' and yeses' times around the window's start."""
    from sqlalchemy import insert

    from call4agents.storage import stat_rows
    from call4agents.storage.tables import approvals, effects

    now = ledger.store.now()
    start = now - 3600
    old, new = start - 600, start + 600  # before and after the window's start

    def ticket(n: int, key: str, state: str, asked: float, *, attempt: int = 1) -> dict[str, Any]:
        return {
            "ticket": f"apr_o{n:03d}",
            "key": key,
            "for_attempt": attempt,
            "run_id": "r",
            "tool": "t",
            "args": "{}",
            "state": state,
            "requested_at": asked,
            "expires_at": asked + 300,
            "signature": "s",
        }

    def action(key: str, first: float, attempt: int = 1) -> dict[str, Any]:
        return {
            "key": key,
            "run_id": "r",
            "tool": "t",
            "kind": "write",
            "state": "succeeded",
            "attempt": attempt,
            "args": "{}",
            "created_at": first,
            "updated_at": first,
        }

    keys = {name: name * 64 for name in "abcdefghij"}
    tickets = [
        ticket(0, keys["a"], "pending", new),  # ran with no yes, in the window
        ticket(1, keys["b"], "spent", new),  # ran with its yes
        ticket(2, keys["c"], "pending", old),  # asked before, ran after, no yes
        ticket(3, keys["d"], "spent", old),  # its yes expired before the window...
        ticket(4, keys["d"], "pending", new),  # ...asked again in it, and ran
        ticket(5, keys["e"], "denied", old),  # ran before the window, no yes
        ticket(6, keys["f"], "denied", new),  # asked twice, no yes: one action
        ticket(7, keys["f"], "pending", new + 1),
        ticket(8, keys["g"], "spent", new),  # a yes for attempt 1; attempt 2 ran without one
        ticket(9, keys["h"], "pending", new),  # never ran
        ticket(10, keys["i"], "expired", new),  # not a ticket state the checks read
        ticket(11, keys["j"], "approved", old, attempt=2),  # a yes for another attempt
        ticket(12, keys["j"], "pending", new),
    ]
    actions = [
        action(keys["a"], new + 5),
        action(keys["b"], new + 5),
        action(keys["c"], new + 5),
        action(keys["d"], new + 5),
        action(keys["e"], old),
        action(keys["f"], new + 5),
        action(keys["g"], new + 5, attempt=2),
        action(keys["i"], new + 5),
        action(keys["j"], new + 5),
    ]
    with ledger.engine.begin() as conn:
        conn.execute(insert(approvals), tickets)
        conn.execute(insert(effects), actions)
    with ledger.store.read() as conn:
        ever = stat_rows.unapproved_since(conn, None)
        since = stat_rows.unapproved_since(conn, start)
        both = stat_rows.unapproved_ever_and_since(conn, start)
    assert len(ever) == 6  # a, c, e, f, g, j (d had a yes, long ago)
    assert len(since) == 5  # a, d (no yes open in the window), f, g, j
    assert both == (len(ever), since)
    assert stats.series(ledger, 3600, 12, ever=True).unapproved_ever == len(ever)
