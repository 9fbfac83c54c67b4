"""`call4agents stats`, the console's health and the alerts count from one mechanism: a change
log the triggers and the repeat counter append to, folded into tallies all time, by minute and
by hour, and per run. After any mix of work, including a worker killed mid-way, the tallies
equal a recount of every action and every counter, and the figures equal the actions counted
row by row."""

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
from call4agents.controls.stats import IRREVERSIBLE_RUNS, compute, series
from call4agents.storage import tally
from call4agents.storage.run_rows import COMPLETED_AT, READS, TOOL_CALLS, TRIGGER
from call4agents.storage.tables import approvals, effects, run_counters, run_tallies, runs, tallies
from tests.conftest import Target

TEN_YEARS = 10 * 365 * 86400.0
Filed = tuple[int, int, str]
# Figures with a history the actions alone do not keep: doubt settled, repeats served.
HISTORY = (tally.DOUBT_IN, tally.DOUBT_OUT, tally.DEDUPED)


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


def recount(conn: Any) -> tuple[Counter[Filed], dict[str, tally.RunTally]]:
    """Every figure the fold keeps, counted here from the actions and the counters themselves,
    all time and by minute and hour; an action now in doubt counts as having fallen in doubt at
    its last change (the ledger keeps no older history of doubt)."""
    filed: Counter[Filed] = Counter()

    def file(at: float | None, name: str, n: int) -> None:
        filed[(0, 0, name)] += n
        for step in (60, 3600) if at is not None else ():
            filed[(step, int(at // step) * step, name)] += n

    per_run: dict[str, tally.RunTally] = {}
    e = effects.c
    for run_id, kind, state, attempt, created, updated in conn.execute(
        select(e.run_id, e.kind, e.state, e.attempt, e.created_at, e.updated_at)
    ):
        file(created, "actions:" + state, 1)
        file(created, "retried", int(attempt > 1))
        file(created, "executions", attempt)
        if state == "in_doubt":
            file(updated, tally.DOUBT_IN, 1)
        run = per_run.setdefault(run_id, tally.RunTally())
        run.actions += 1
        run.failed += state == "failed"
        if kind == "irreversible":
            file(created, "irreversible", attempt)
            run.irreversible += attempt
        run.last_at = max(run.last_at or created, created)
    counters: dict[str, dict[str, float]] = {}
    for run_id, name, value in conn.execute(select(run_counters)):
        counters.setdefault(run_id, {})[name] = value
    for run_id, found in counters.items():
        run = per_run.setdefault(run_id, tally.RunTally())
        run.completed = int(COMPLETED_AT in found)
        run.has_read = int(found.get(READS, 0) > 0)
        if TOOL_CALLS in found:
            file(None, f"tool_calls:{found[TOOL_CALLS]:.15g}", 1)
        if "cost" in found:
            file(None, f"cost:{tally.two_figures(found['cost']):.15g}", 1)
        for name in found:
            if name.startswith(TRIGGER):
                file(None, "runs_trigger:" + name[len(TRIGGER) :], 1)
    for run in per_run.values():
        file(None, "runs", int(run.actions > 0))
        file(None, "runs_failed", int(run.failed > 0))
        file(None, "runs_completed", run.completed)
        file(None, "runs_completed_with_read", int(run.completed and run.has_read > 0))
    kept = {r: t for r, t in per_run.items() if t.actions or t.completed or t.has_read}
    return +filed, kept


def counted_row_by_row(ledger: c4a.Ledger, start: float | None) -> dict[str, Any]:
    """The figures of the actions first attempted at ``start`` or later (all if None), counted
    here from each of them, as `stats` counted before it kept tallies."""
    e = effects.c
    with ledger.store.read() as conn:
        now = ledger.store.now()
        stmt = select(e.run_id, e.kind, e.state, e.attempt)
        rows = conn.execute(stmt.where(e.created_at >= (start or 0))).all()
        endings = dict(conn.execute(select(runs.c.run_id, runs.c.status)).all())
        waiting = set(
            conn.execute(
                select(approvals.c.run_id).where(
                    approvals.c.state == "pending", approvals.c.expires_at > now
                )
            ).scalars()
        )
    irreversible: Counter[str] = Counter()
    states: dict[str, set[str]] = {}
    for r in rows:
        irreversible[r.run_id] += r.attempt if r.kind == "irreversible" else 0
        states.setdefault(r.run_id, set()).add(r.state)
    by_run = sorted(+irreversible, key=lambda run: (irreversible[run], run), reverse=True)
    run_states: Counter[str] = Counter()
    for run_id, seen in states.items():
        state = (
            "in_doubt"
            if "in_doubt" in seen
            else "running"
            if "started" in seen
            else "waiting_approval"
            if run_id in waiting
            else "has_failures"
            if "failed" in seen
            else "done"
        )
        run_states[endings.get(run_id) or state] += 1
    return {
        "actions_by_state": dict(Counter(r.state for r in rows)),
        "retried_actions": sum(r.attempt > 1 for r in rows),
        "executions": sum(r.attempt for r in rows),
        "irreversible_executions": sum(irreversible.values()),
        "irreversible_per_run": {run: irreversible[run] for run in by_run[:IRREVERSIBLE_RUNS]},
        "runs_by_state": dict(sorted(run_states.items())),
    }


def assert_tallies_match(ledger: c4a.Ledger) -> dict[str, Any]:
    fast = tallied(ledger)
    for age in ("in_doubt_oldest_age", "approvals_oldest_age"):  # the clock moved between reads
        fast.pop(age)
    slow = windowed(ledger)
    for age in ("in_doubt_oldest_age", "approvals_oldest_age"):
        slow.pop(age)
    assert fast == slow
    assert {k: fast[k] for k in counted_row_by_row(ledger, None)} == counted_row_by_row(
        ledger, None
    )
    with ledger.store.tx() as conn:
        assert tally.count_changes(conn) == 0  # compute folded every change
        expected, expected_runs = recount(conn)
        kept = Counter({(s, a, n): v for s, a, n, v in conn.execute(select(tallies))})
        assert +Counter({k: n for k, n in kept.items() if k[2] not in HISTORY}) == Counter(
            {k: n for k, n in expected.items() if k[2] not in HISTORY}
        )
        # The history of doubt nets out to what is in doubt now, all time and in each step.
        for step in (0, *tally.STEPS):
            net = sum(
                n if k[2] == tally.DOUBT_IN else -n
                for k, n in kept.items()
                if k[0] == step and k[2] in (tally.DOUBT_IN, tally.DOUBT_OUT)
            )
            assert net == expected[(0, 0, "actions:in_doubt")]
        # Exactly the runs that have actions or run figures have a tally, and it is right.
        per_run = tally.runs_of(conn, expected_runs, every=True)
        assert per_run.keys() == expected_runs.keys()
        assert conn.execute(select(run_tallies.c.run_id)).scalars().all().__len__() == len(per_run)
        for run_id, run in per_run.items():
            recounted = expected_runs[run_id]
            # A deleted action's time stays: a run's latest action ever recorded.
            assert (run.last_at or 0) >= (recounted.last_at or 0)
            run.last_at = recounted.last_at
        assert per_run == expected_runs
    assert_run_figures_match(ledger)
    return fast


def assert_run_figures_match(ledger: c4a.Ledger) -> None:
    """The alerts' figures from the tallies equal each run's counters read one by one."""
    assert stats._every_run(ledger) == stats._runs_entered(ledger, TEN_YEARS)


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
            assert_tallies_match(ledger)

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
    p99 = tally.quantile(figures.costs, 0.99)
    assert p99 is not None
    assert p99 == tally.two_figures(p99)
    ledger.gc(older_than=0)  # the run counters of every run go with it
    assert_tallies_match(ledger)
    after = stats._every_run(ledger)
    assert (after.completed, after.triggers) == (0, {})
    assert tally.quantile(after.costs, 0.95) is not None  # a budget's counters stay


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
def test_a_read_only_user_gets_the_figures_as_of_the_last_fold(pg_target: Target) -> None:
    """Folding writes; a user who may only read gets the figures as the last fold left them,
    told how many changes wait, and the same figures as anyone once a writer folded them."""
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
        stale = tallied(reader)
        stale_series = series(reader, 3600, 4)
        stale_runs = stats._every_run(reader)
        with ledger.store.tx() as conn:
            waiting = tally.count_changes(conn)
        assert waiting > 2  # the late action's intent and outcome, and its run's counters
        rendered = stats.render(compute(reader))
        tallied(ledger)  # a writer folds them
        caught_up = tallied(reader)
        reader.close()
    finally:
        with ledger.engine.begin() as conn:
            conn.execute(text(f"DROP OWNED BY {role}"))
            conn.execute(text(f"DROP ROLE {role}"))
    assert stale["changes_not_counted"] == waiting
    assert f"Not counted yet:          {waiting} changes since the last fold" in rendered
    assert {k: v for k, v in stale.items() if "age" not in k and k != "changes_not_counted"} == {
        k: v for k, v in expected.items() if "age" not in k and k != "changes_not_counted"
    }
    assert [b.executions for b in stale_series.buckets] == [b.executions for b in charted.buckets]
    assert caught_up["changes_not_counted"] == 0
    assert caught_up["actions"] == expected["actions"] + 1
    assert stale_runs.completed == 11 + 5  # the budgeted runs and a to e; "later" not yet
    assert stats._every_run(ledger).completed == 11 + 6


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
    assert tally.quantile(figures.costs, 0.99) is not None
    assert tally.quantile(figures.calls, 0.95) is not None
