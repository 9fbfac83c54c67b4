"""Figures over time come from the timeline (the tallies by minute and by hour): a window's
figures equal a count of its actions row by row and open doubt has a history. On
both backends."""

from __future__ import annotations

import pytest
from sqlalchemy import update

import call4agents as c4a
from call4agents.controls import stats
from call4agents.storage import tally
from call4agents.storage.run_rows import COMPLETED_AT, ENTERED_AT
from call4agents.storage.tables import changes, effects, run_counters, runs
from tests.otel.test_stats_tallies import (
    assert_tallies_match,
    counted_row_by_row,
)

HOUR = 3600.0


def age(ledger: c4a.Ledger, run_id: str, seconds: float) -> None:
    """Move a run's actions, and the changes not yet folded for them, ``seconds`` back in time,
    as if the run had happened then. Call before anything folds them."""
    with ledger.engine.begin() as conn:
        conn.execute(
            update(effects)
            .where(effects.c.run_id == run_id)
            .values(
                created_at=effects.c.created_at - seconds,
                updated_at=effects.c.updated_at - seconds,
            )
        )
        conn.execute(
            update(changes)
            .where(changes.c.run_id == run_id)
            .values(created_at=changes.c.created_at - seconds, at=changes.c.at - seconds)
        )


def work(ledger: c4a.Ledger) -> None:
    """Runs at five ages: each writes, some fail, retry, act irreversibly or fall in doubt."""

    @c4a.effect(name="send")
    def send(n: int) -> int:
        return n

    @c4a.effect(name="wire", kind="irreversible")
    def wire(n: int) -> int:
        return n

    @c4a.effect(name="charge")
    def charge(n: int) -> int:
        raise ValueError("declined")

    @c4a.effect(name="post")
    def post(n: int) -> int:
        raise TimeoutError("no answer")  # a write that may have happened: in doubt

    for i, hours in enumerate((0.1, 0.9, 5.5, 30, 200)):
        run_id = f"r{i}"
        with c4a.run(run_id):
            for n in range(i + 1):
                send(n)
            wire(i)
            if i % 2:
                with pytest.raises(ValueError):
                    charge(i)
                with pytest.raises(ValueError):
                    charge(i)  # a second attempt
            if i == 3:
                with pytest.raises(TimeoutError):
                    post(i)
        age(ledger, run_id, hours * HOUR)


@pytest.mark.parametrize("since", [1800, HOUR, 6 * HOUR, 86400, 7 * 86400, 30 * 86400])
def test_a_window_equals_its_actions_counted_row_by_row(ledger: c4a.Ledger, since: float) -> None:
    work(ledger)
    fast = stats.compute(ledger, since).as_dict()
    rows = counted_row_by_row(ledger, stats.window_start(ledger.store.now(), since))
    assert {k: fast[k] for k in rows} == rows
    # Each run lies wholly inside or outside the window: the window holds the runs younger
    # than it.
    inside = sum(hours * HOUR < since for hours in (0.1, 0.9, 5.5, 30, 200))
    assert sum(fast["runs_by_state"].values()) == inside


def test_windows_cost_hour_rows_not_actions(ledger: c4a.Ledger) -> None:
    work(ledger)
    stats.compute(ledger)  # fold
    with ledger.store.read() as conn:
        rows = {step: tally.between(conn, step, 0, None) for step in tally.STEPS}
    # Each figure of each minute (or hour) with actions first attempted in it is one row.
    assert {at % 60 for at, _, _ in rows[60]} == {0}
    assert {at % 3600 for at, _, _ in rows[3600]} == {0}
    assert sum(n for _, name, n in rows[3600] if name == "executions") == (
        stats.compute(ledger).executions
    )


def test_series_buckets_are_whole_minutes_or_hours(ledger: c4a.Ledger) -> None:
    day = stats.series(ledger, 86400, 24)
    assert day.bucket_seconds == HOUR
    assert all(b.start % HOUR == 0 for b in day.buckets)
    assert day.buckets[-1].end <= ledger.store.now()
    week = stats.series(ledger, 7 * 86400, 28)
    assert week.bucket_seconds == 6 * HOUR
    hour = stats.series(ledger, HOUR, 12)
    assert hour.bucket_seconds == 300
    assert all(b.start % 60 == 0 for b in hour.buckets)
    odd = stats.series(ledger, 1000, 7)  # 142.9 s a bucket: rounded up to whole minutes
    assert odd.bucket_seconds == 180
    assert len(odd.buckets) == 7


def test_open_doubt_has_a_history(ledger: c4a.Ledger) -> None:
    @c4a.effect(name="post")
    def post(n: int) -> int:
        raise TimeoutError("no answer")

    with c4a.run("late"), pytest.raises(TimeoutError):
        post(1)
    age(ledger, "late", 3 * HOUR)  # it fell in doubt three hours ago
    fell_at = ledger.store.now() - 3 * HOUR
    before = stats.series(ledger, 6 * HOUR, 6)
    (record,) = ledger.in_doubt()
    ledger.resolve(record.key, happened=True, result=1, by="ann")  # settled now
    after = stats.series(ledger, 6 * HOUR, 6)
    fell = next(i for i, b in enumerate(after.buckets) if b.start <= fell_at < b.start + HOUR)
    assert [b.in_doubt_open for b in before.buckets] == [int(i >= fell) for i in range(6)]
    # Open from the bucket it fell in until the one it was settled in, which ends at 0.
    assert [b.in_doubt_open for b in after.buckets] == [int(fell <= i < 5) for i in range(6)]
    assert_tallies_match(ledger)


def test_an_escalation_is_open_until_it_is_picked_up(ledger: c4a.Ledger) -> None:
    with pytest.raises(c4a.Escalated), c4a.run("stuck"):
        c4a.escalate("needs a person")
    with ledger.engine.begin() as conn:  # it was entered and escalated four hours ago
        conn.execute(
            update(runs).values(
                created_at=runs.c.created_at - 4 * HOUR, updated_at=runs.c.updated_at - 4 * HOUR
            )
        )
        conn.execute(
            update(run_counters)
            .where(run_counters.c.name.in_([ENTERED_AT, COMPLETED_AT]))
            .values(value=run_counters.c.value - 4 * HOUR)
        )
    made = ledger.store.now() - 4 * HOUR
    waiting = stats.series(ledger, 6 * HOUR, 6)
    first = next(i for i, b in enumerate(waiting.buckets) if b.start <= made < b.start + HOUR)
    assert [b.escalations_open for b in waiting.buckets] == [int(i >= first) for i in range(6)]
    with c4a.run("stuck"):  # a person picks it up
        pass
    picked = stats.series(ledger, 6 * HOUR, 6)
    assert [b.escalations_open for b in picked.buckets] == [int(first <= i < 5) for i in range(6)]
    opened = stats.open_figures(ledger)
    assert (opened.escalations_open, opened.escalations_oldest_age) == (0, None)
    oldest = picked.buckets[4].escalations_oldest_age
    assert oldest is not None
    assert oldest > 3 * HOUR


def test_an_entry_written_late_never_picks_up_its_own_escalation(ledger: c4a.Ledger) -> None:
    """A run's entry is written as it ends, its start estimated as the database's time less the
    time the caller measured. Written late (a busy machine, a slow database), that estimate fell
    after the escalation the entry itself made, which then read as picked up at once: here the
    entry's write comes with no time measured at all, as late as it can be."""
    from call4agents.storage import run_rows

    with pytest.raises(c4a.Escalated), c4a.run("late"):
        c4a.escalate("needs a person")
    for _ in range(2):  # its end, written again as late as can be
        run_rows.add_entry(
            ledger.store,
            "late",
            trigger=None,
            wall_clock_ms=0.0,
            tool_calls=0,
            reads=0,
            completed=False,
            escalated=True,
        )
    assert stats.open_figures(ledger).escalations_open == 1
    assert stats.series(ledger, HOUR, 1).buckets[-1].escalations_open == 1
    with c4a.run("late"):  # a person picks it up
        pass
    assert stats.open_figures(ledger).escalations_open == 0
