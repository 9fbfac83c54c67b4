"""`call4agents stats` answers all-time figures from tallies kept as actions change, and the
alerts' run figures from tallies kept as run counters change: after any mix of work, including a
worker killed mid-way, they equal a recount of every action and every counter."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import make_url, select, text

import call4agents as c4a
from call4agents.controls import stats
from call4agents.controls.stats import (
    IRREVERSIBLE_RUNS,
    _from_rows,
    _from_tallies,
    compute,
    series,
)
from call4agents.storage import _run_tally, _tally
from call4agents.storage.stat_rows import after_folding
from call4agents.storage.tables import run_marks, run_tallies, tallies
from tests.conftest import Target

TEN_YEARS = 10 * 365 * 86400.0


def windowed(ledger: c4a.Ledger) -> dict[str, Any]:
    """Every figure from the timeline: a window wide enough to hold every action sums its
    minute and hour rows."""
    found = compute(ledger, TEN_YEARS).as_dict()
    found.pop("since_seconds")
    return found


def tallied(ledger: c4a.Ledger) -> dict[str, Any]:
    found = compute(ledger).as_dict()
    found.pop("since_seconds")
    return found


def assert_tallies_match(ledger: c4a.Ledger) -> dict[str, Any]:
    fast = tallied(ledger)
    for age in ("in_doubt_oldest_age", "approvals_oldest_age"):  # the clock moved between reads
        fast.pop(age)
    slow = windowed(ledger)
    for age in ("in_doubt_oldest_age", "approvals_oldest_age"):
        slow.pop(age)
    assert fast == slow
    # Row by row, as stats counted before it kept tallies.
    assert _from_rows(ledger, ledger.store.now(), None) == after_folding(
        ledger.store, lambda conn: _from_tallies(conn, ledger.store.now())
    )
    with ledger.store.tx() as conn:
        assert _tally.count_changes(conn) == 0  # compute folded every change
        found = _tally.recount(conn)
        assert {k: v for k, v in _tally.read(conn).items() if v} == found.total
        # Exactly the runs that have actions have a tally, and it is right.
        kept = {
            r.run_id: _tally.RunTally(r.actions, r.failed, r.irreversible, r.last_at)
            for r in conn.execute(select(run_tallies))
        }
        assert kept.keys() == found.per_run.keys()
        for run_id, run in kept.items():
            recounted = found.per_run[run_id]
            assert run.last_at is not None
            assert recounted.last_at is not None
            # A deleted action's time stays: a run's latest action ever recorded.
            assert run.last_at >= recounted.last_at
            run.last_at = recounted.last_at
        assert kept == found.per_run
        assert_timeline_matches(conn, found)
    assert_run_tallies_match(ledger)
    return fast


def assert_run_tallies_match(ledger: c4a.Ledger) -> None:
    """The run figures kept as counters change equal a recount of every counter, and the alerts'
    figures from them equal the database's count over the counters' value index."""
    from_tallies = stats._every_run(ledger)  # folds
    with ledger.store.read() as conn:
        assert from_tallies == stats._counted_runs(conn)
    with ledger.store.tx() as conn:
        assert _run_tally.count_changes(conn) == 0
        found = _run_tally.recount(conn)
        kept = {
            str(name): int(n)
            for name, n in conn.execute(select(tallies).where(tallies.c.name.not_in(_tally.NAMES)))
            if n
        }
        assert kept == found.total
        marks = {
            r.run_id: _run_tally.RunMark(r.completed, r.has_read)
            for r in conn.execute(select(run_marks))
        }
        assert marks == found.marks


def assert_timeline_matches(conn: Any, found: _tally.Recount) -> None:
    """The timeline, minute by minute and hour by hour, is the recount's; the history of doubt
    nets out to what is in doubt now."""
    doubt = (_tally.DOUBT_IN, _tally.DOUBT_OUT)
    in_doubt = found.total.get("actions:in_doubt", 0)
    for step in _tally.STEPS:
        rows = _tally.timeline_between(conn, step, 0, None)
        kept = Counter({(step, at, name): n for at, name, n in rows if name not in doubt})
        expected = Counter({k: n for k, n in found.timeline.items() if k[0] == step})
        expected = Counter({k: n for k, n in expected.items() if k[2] not in doubt})
        assert +kept == +expected
        net = sum(n if name == _tally.DOUBT_IN else -n for _, name, n in rows if name in doubt)
        assert net == in_doubt


def mixed_work(ledger: c4a.Ledger) -> None:
    """Succeeded, failed and retried, in doubt and resolved both ways, deduplicated, approved,
    waiting, escalated, garbage-collected and deleted."""

    @c4a.effect(name="send")
    def send(n: int) -> int:
        return n

    @c4a.effect(name="wire", kind="irreversible")
    def wire(amount: int) -> str:
        if amount < 0:
            raise TimeoutError("bank did not answer")  # irreversible and unknown: in doubt
        return "ok"

    @c4a.effect(name="charge")
    def charge(amount: int) -> str:
        raise ValueError("declined")

    @c4a.effect(name="refund", approval=True)
    def refund(order: str) -> str:
        return "re"

    with c4a.run("a"):
        send(1)
        send(1)  # served from the record
        wire(1)
        with pytest.raises(TimeoutError):
            wire(-1)
        with pytest.raises(TimeoutError):
            wire(-2)
        for _ in range(2):  # attempt 1 and attempt 2
            with pytest.raises(ValueError):
                charge(5)
    doubt = {r.args["amount"]: r.key for r in ledger.in_doubt()}
    ledger.resolve(doubt[-1], happened=True, result="ok", by="ops")
    ledger.resolve(doubt[-2], happened=False, by="ops")
    with c4a.run("a"), pytest.raises(TimeoutError):
        wire(-2)  # the second attempt, in doubt again
    with c4a.run("b"):
        send(1)
        with pytest.raises(c4a.ApprovalRequired) as asked:
            refund("o-1")
        with pytest.raises(c4a.ApprovalRequired):
            refund("o-2")  # left waiting
    ledger.approve(asked.value.request.ticket, by="ann")
    with c4a.run("b"):
        assert refund("o-1") == "re"
    with c4a.run("c"):
        with pytest.raises(ValueError):
            charge(1)
        send(3)
    with c4a.run("d"):
        send(4)
        with pytest.raises(c4a.Escalated):
            c4a.escalate("customer asked for a manager")
    with c4a.run("gone"):
        send(5)
        wire(5)
    ledger.delete_run("gone")
    with c4a.run("e"):
        with pytest.raises(ValueError):
            charge(9)  # deleted by gc: a failure did not act
        send(6)
    ledger.dedup.flush()


def test_tallies_equal_a_recount_after_mixed_work(target: Target) -> None:
    ledger = c4a.init(target.open())
    assert assert_tallies_match(ledger)["actions"] == 0
    mixed_work(ledger)
    before_gc = assert_tallies_match(ledger)
    assert before_gc["runs_by_state"] == {
        "escalated": 1,
        "has_failures": 2,
        "in_doubt": 1,
        "waiting_approval": 1,
    }
    assert before_gc["irreversible_per_run"] == {"a": 4}
    assert before_gc["retried_actions"] == 2
    ledger.gc(older_than=0)
    after_gc = assert_tallies_match(ledger)
    assert after_gc["actions_by_state"].get("failed", 0) == 0
    assert after_gc["runs_by_state"]["done"] == 2  # c and e lost their failures to gc


def test_a_ledger_from_before_tallies_is_seeded(target: Target) -> None:
    ledger = c4a.init(target.open())
    mixed_work(ledger)
    from call4agents.storage.migrations import migrate
    from call4agents.storage.tables import schema_version

    with ledger.engine.begin() as conn:
        conn.execute(schema_version.update().values(version=6))
    assert migrate(ledger.engine, schema=target.schema)[0] == 6
    assert_tallies_match(ledger)


CHILD = """
import os, sys, time
import call4agents as c4a

c4a.init(os.environ["C4A_TEST_URL"], schema=os.environ.get("C4A_TEST_SCHEMA") or None)
block = sys.argv[1] == "block"


@c4a.effect(name="step")
def step(n: int) -> int:
    if block:
        print("inside", flush=True)
        time.sleep(600)
    return n


with c4a.run("crash-" + sys.argv[1]):
    for n in range(1_000_000):
        try:
            step(n)
        except Exception:
            pass
        print(n, flush=True)
"""


def killed_child(target: Target, script: Path, mode: str, lines: int) -> None:
    """Start the child and SIGKILL it once it printed ``lines`` lines."""
    child = subprocess.Popen(
        [sys.executable, str(script), mode], env=target.env(), stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None
    for _ in range(lines):
        assert child.stdout.readline(), "the child ended early"
    os.kill(child.pid, signal.SIGKILL)
    assert child.wait(30) == -signal.SIGKILL
    child.stdout.close()


def budgeted_work(ledger: c4a.Ledger) -> None:
    """Runs with budgets whose cost rises entry after entry, reads added on a later entry,
    runs entered again under other triggers, completed or left open, then deleted and
    collected."""

    @c4a.effect(name="look", kind="read")
    def look(n: int) -> int:
        return n

    @c4a.effect(name="post")
    def post(n: int) -> int:
        return n

    budget = c4a.Budget(max_cost=1000)
    for i in range(12):
        run_id = f"budgeted-{i}"
        with c4a.run(run_id, trigger="schedule" if i % 3 else "user", budget=budget):
            c4a.record_model_usage(100, 10, cost=0.0137 * (i + 1))
            for n in range(i % 4):
                post(i * 100 + n)
        if i % 2:  # a second entry: more cost, and its first read
            with c4a.run(run_id, trigger="user", budget=budget):
                c4a.record_model_usage(100, 10, cost=1.1 * i)
                look(i)
                post(i * 100 + 50)
        if i % 5 == 0:
            assert_run_tallies_match(ledger)

    def broke() -> None:
        with c4a.run("broke", trigger="user", budget=budget):
            c4a.record_model_usage(100, 10, cost=2.5)
            raise RuntimeError("the agent failed")

    with pytest.raises(RuntimeError):
        broke()
    assert_tallies_match(ledger)
    ledger.delete_run("budgeted-3")
    assert_tallies_match(ledger)


def test_run_tallies_equal_a_recount_as_counters_change(target: Target) -> None:
    ledger = c4a.init(target.open())
    budgeted_work(ledger)
    figures = stats._every_run(ledger)
    # A completed run entered again is a retry, whatever trigger it was given; budgeted-3 went.
    assert figures.triggers == {"retry": 5, "schedule": 8, "user": 4}
    assert (figures.completed, figures.without_read) == (11, 6)
    assert figures.cost_p99 is not None
    assert figures.cost_p99 == _run_tally.two_figures(figures.cost_p99)
    ledger.gc(older_than=0)  # the run counters of every run go with it
    assert_tallies_match(ledger)
    after = stats._every_run(ledger)
    assert (after.completed, after.triggers) == (0, {})
    assert after.cost_p95 is not None  # a budget's counters stay


def test_tallies_equal_a_recount_after_a_worker_is_killed(target: Target, tmp_path: Path) -> None:
    ledger = c4a.init(target.open())
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    killed_child(target, script, "loop", 200)  # wherever it was: between, or inside, a write
    killed_child(target, script, "block", 1)  # inside its tool: the action stays started
    found = assert_tallies_match(ledger)  # the sweep judged the dead owner's action in doubt
    assert found["in_doubt"] >= 1
    assert found["runs_by_state"]["in_doubt"] >= 1
    assert found["actions"] >= 201


@pytest.mark.postgres
def test_a_read_only_user_gets_the_same_figures(pg_target: Target) -> None:
    """Folding writes; a user who may only read gets the figures counted from every action."""
    ledger = c4a.init(pg_target.open())
    mixed_work(ledger)
    budgeted_work(ledger)
    expected = tallied(ledger)  # folds what there is so far
    charted = series(ledger, 3600, 4)
    with c4a.run("later"):
        c4a.effect(name="late")(lambda: 1)()  # logged, not yet folded
    role = "c4a_ro_" + uuid.uuid4().hex[:8]
    schema = f'"{pg_target.schema}"'
    with ledger.engine.begin() as conn:
        conn.execute(text(f"CREATE ROLE {role} LOGIN"))
        conn.execute(text(f"GRANT USAGE ON SCHEMA {schema} TO {role}"))
        conn.execute(text(f"GRANT SELECT ON ALL TABLES IN SCHEMA {schema} TO {role}"))
    url = make_url(pg_target.url).set(username=role).render_as_string(hide_password=False)
    try:
        reader = c4a.Ledger(url, schema=pg_target.schema, auto_migrate=False)
        found = compute(reader).as_dict()
        windowed = compute(reader, 3600)  # the window's actions, row by row
        stale = series(reader, 3600, 4)  # the timeline as of the last fold
        runs_counted = stats._every_run(reader)  # over the counters' value index
        reader.close()
    finally:
        with ledger.engine.begin() as conn:
            conn.execute(text(f"DROP OWNED BY {role}"))
            conn.execute(text(f"DROP ROLE {role}"))
    assert found["actions"] == expected["actions"] + 1
    assert found["runs_by_state"]["done"] == expected["runs_by_state"].get("done", 0) + 1
    assert windowed.actions == found["actions"]  # every action is younger than an hour
    assert [b.executions for b in stale.buckets] == [b.executions for b in charted.buckets]
    with ledger.store.tx() as conn:
        assert _tally.count_changes(conn) == 2  # its intent and its outcome: nothing folded
        assert _run_tally.count_changes(conn) > 0  # nor its counters
    assert runs_counted == stats._every_run(ledger)  # folds them
    assert runs_counted.completed == 11 + 6  # the budgeted runs, a to e and later


def test_irreversible_runs_listed_are_the_top_ones(target: Target) -> None:
    ledger = c4a.init(target.open())

    @c4a.effect(name="wire", kind="irreversible")
    def wire(n: int) -> int:
        return n

    for run in range(IRREVERSIBLE_RUNS + 5):
        with c4a.run(f"r{run:02d}"):
            for n in range(1 + run % 3):
                wire(n)
    fast = tallied(ledger)
    assert fast == windowed(ledger)
    listed = fast["irreversible_per_run"]
    assert len(listed) == IRREVERSIBLE_RUNS
    assert list(listed.values()) == sorted(listed.values(), reverse=True)
    # The 16 runs with 3 or 2, then the last four by run id of those with 1.
    assert [run for run, n in listed.items() if n == 1] == ["r24", "r21", "r18", "r15"]
    assert fast["irreversible_executions"] == sum(1 + run % 3 for run in range(25))


@pytest.fixture
def pg_by_language(pg_target: Target) -> Iterator[Target]:
    """A ledger (in a schema of its own) in a database whose collation is ICU's en-US, where
    "runs_trigger:user" sorts after "runs_trigger;" (punctuation is passed over)."""
    import psycopg

    server = make_url(pg_target.url)
    name = "c4a_icu_" + uuid.uuid4().hex[:12]
    admin = server.set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(
            f"CREATE DATABASE {name} TEMPLATE template0 LOCALE_PROVIDER icu ICU_LOCALE 'en-US' "
            "LOCALE 'C.UTF-8'"
        )
    target = Target("postgres", server.set(database=name).render_as_string(hide_password=False))
    try:
        yield target
    finally:
        for ledger in target.opened:
            ledger.close()
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def punctuation_passed_over(ledger: c4a.Ledger) -> bool:
    with ledger.store.read() as conn:
        return bool(conn.execute(text("SELECT 'runs_trigger:user' > 'runs_trigger;'")).scalar())


@pytest.mark.postgres
def test_figures_read_by_name_hold_where_the_database_sorts_by_language(
    pg_by_language: Target,
) -> None:
    ledger = c4a.init(pg_by_language.open())
    assert punctuation_passed_over(ledger)
    budgeted_work(ledger)
    figures = stats._every_run(ledger)
    assert figures.triggers == {"retry": 5, "schedule": 8, "user": 4}
    assert figures.cost_p99 is not None
    assert figures.calls_p95 is not None


@pytest.mark.postgres
def test_a_ledger_read_by_language_before_version_11_gets_its_run_figures_back(
    pg_by_language: Target,
) -> None:
    from call4agents.storage import _fold
    from call4agents.storage.migrations import CURRENT, migrate
    from call4agents.storage.tables import schema_version

    ledger = c4a.init(pg_by_language.open())
    budgeted_work(ledger)
    with ledger.store.tx() as conn:  # as version 10 left it: names in the database's order...
        _run_tally.drop_triggers(conn)
        for table, sql_type in (("c4a_run_counters", "text"), ("c4a_tallies", "varchar(64)")):
            conn.execute(
                text(
                    f"ALTER TABLE {_fold.qualified(conn, table)} "
                    f'ALTER COLUMN name TYPE {sql_type} COLLATE "default"'
                )
            )
        _run_tally.create_triggers(conn)
        # ...and the figures by trigger its seed could not see.
        conn.execute(tallies.delete().where(tallies.c.name.startswith(_run_tally.BY_TRIGGER)))
        conn.execute(schema_version.update().values(version=10))
    assert stats._every_run(ledger).triggers == {}  # what such a ledger showed
    assert migrate(ledger.engine) == (10, CURRENT)
    assert stats._every_run(ledger).triggers == {"retry": 5, "schedule": 8, "user": 4}
    assert_tallies_match(ledger)
