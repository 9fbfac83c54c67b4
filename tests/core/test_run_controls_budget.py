"""Budgets: counted in the ledger, so neither a resume nor a second worker resets them."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import signal
import threading
from pathlib import Path

import pytest
from pydantic_ai import Agent
from sqlalchemy import select, update

import call4agents as c4a
from call4agents.storage.tables import run_counters
from call4agents_pydantic_ai import OnceOnly
from tests import forked
from tests.conftest import Target, run_child
from tests.pydantic_ai.scripted import Outbox, scripted

CHILD = Path(__file__).with_name("run_controls_child.py")


def spend(ledger: c4a.Ledger, run_id: str, budget: c4a.Budget, amounts: list[int]) -> list[str]:
    done: list[str] = []

    @c4a.effect(name="pay")
    def pay(amount: int) -> int:
        done.append(f"pay {amount}")
        return amount

    outcomes = []
    with c4a.run(run_id, budget=budget):
        for amount in amounts:
            try:
                pay(amount)
                outcomes.append("ok")
            except c4a.BudgetExceeded as exc:
                outcomes.append(exc.reason)
    return outcomes


def test_step_limit_counts_executions_not_repeats(ledger: c4a.Ledger) -> None:
    budget = c4a.Budget(max_tool_calls=3)
    # The repeat of 1 is served from the ledger: it costs nothing.
    assert spend(ledger, "b-1", budget, [1, 2, 1, 3, 4]) == ["ok"] * 4 + ["step_limit"]
    status = ledger.run_status("b-1")
    assert status is not None
    assert status.status == "step_limit"
    assert status.details["budget"]["detail"] == "3 tool calls"
    assert [r.args["amount"] for r in ledger.effects("b-1")] == [1, 2, 3]  # 4 never started


def test_per_tool_limit_and_soft_threshold(ledger: c4a.Ledger) -> None:
    @c4a.effect(name="email")
    def email(to: str) -> str:
        return "sent"

    @c4a.effect(name="sms")
    def sms(to: str) -> str:
        return "sent"

    budget = c4a.Budget(max_calls_per_tool=5, soft=0.8)
    with c4a.run("b-2", budget=budget):
        for i in range(3):
            email(f"u{i}")
        assert not c4a.budget_usage().soft_reached
        email("u3")
        usage = c4a.budget_usage()
        assert usage.soft_reached  # 4 of 5: tell the agent to wrap up
        assert usage.per_tool == {"email": 4}
        assert usage.tool_calls == 4
        email("u4")
        with pytest.raises(c4a.BudgetExceeded, match="5 calls of email"):
            email("u5")
        sms("u0")  # another tool still has its own allowance


def test_deadline_survives_a_new_process(ledger: c4a.Ledger, target: Target) -> None:
    budget = c4a.Budget(deadline=3600)
    assert spend(ledger, "b-3", budget, [1]) == ["ok"]
    # An hour passes (moved in the ledger rather than waited for).
    with ledger.engine.begin() as conn:
        conn.execute(
            update(run_counters)
            .where(run_counters.c.run_id == "b-3", run_counters.c.name == "started_at")
            .values(value=run_counters.c.value - 3601)
        )
    fresh = c4a.init(target.open())  # as a resumed worker would open it
    assert spend(fresh, "b-3", budget, [1, 2]) == ["ok", "deadline"]  # the repeat is free
    status = fresh.run_status("b-3")
    assert status is not None
    assert status.status == "deadline"


def started_at(ledger: c4a.Ledger, run_id: str) -> float | None:
    with ledger.engine.connect() as conn:
        return conn.execute(
            select(run_counters.c.value).where(
                run_counters.c.run_id == run_id, run_counters.c.name == "started_at"
            )
        ).scalar_one_or_none()


def test_deadline_counts_from_the_runs_start_across_a_crash(
    ledger: c4a.Ledger, target: Target, tmp_path: Path
) -> None:
    out = tmp_path / "world.txt"
    env = dict(target.env(), MAX_CALLS="5", DEADLINE="3600", AMOUNTS="1")
    # Killed as the run starts, before any counted call: the clock already runs.
    killed = run_child(CHILD, "budget", "b-clock", str(out), "kill_after_0", env=env)
    assert killed.returncode == -signal.SIGKILL
    assert not out.exists()
    start = started_at(ledger, "b-clock")
    assert start is not None
    resumed = run_child(CHILD, "budget", "b-clock", str(out), env=env)
    assert json.loads(resumed.stdout) == ["ok"], resumed.stderr
    assert started_at(ledger, "b-clock") == start  # the resume kept the original start
    # An hour after that start (moved in the ledger rather than waited for), a resume is cut.
    with ledger.engine.begin() as conn:
        conn.execute(
            update(run_counters)
            .where(run_counters.c.run_id == "b-clock", run_counters.c.name == "started_at")
            .values(value=run_counters.c.value - 3601)
        )
    late = run_child(CHILD, "budget", "b-clock", str(out), env=dict(env, AMOUNTS="2"))
    assert json.loads(late.stdout) == ["refused:deadline"], late.stderr
    assert out.read_text().splitlines() == ["charge 1"]


def test_an_async_run_starts_its_clock_on_entry(ledger: c4a.Ledger) -> None:
    async def main() -> None:
        async with c4a.run("b-async", budget=c4a.Budget(deadline=60)):
            assert c4a.budget_usage().elapsed is not None  # nothing counted yet
        async with c4a.run("b-async-free"):
            pass

    asyncio.run(main())
    assert started_at(ledger, "b-async") is not None
    assert started_at(ledger, "b-async-free") is None  # no budget: no ledger work


def test_a_run_whose_start_cannot_be_written_still_runs(
    ledger: c4a.Ledger, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # The default ledger has lost its tables (its schema dropped under it, say); the tool's
    # own ledger is fine. Entering the run only logs; the first counted step starts the clock.
    lost = c4a.init(f"sqlite:///{tmp_path / 'lost.db'}")
    with lost.engine.begin() as conn:
        run_counters.drop(conn)
    pay = c4a.effect(name="pay", ledger=ledger)(lambda amount: amount)
    with c4a.run("b-lost", budget=c4a.Budget(deadline=60)):
        assert "could not record a run's start" in caplog.text
        assert started_at(ledger, "b-lost") is None
        assert pay(5) == 5
    assert started_at(ledger, "b-lost") is not None


def test_nested_runs_count_against_the_parent(ledger: c4a.Ledger) -> None:
    @c4a.effect(name="step")
    def step(n: int) -> int:
        return n

    with c4a.run("parent", budget=c4a.Budget(max_tool_calls=3)):
        step(1)
        with c4a.run("sub-agent"):  # an agent used as a tool: its own run id, the parent's budget
            step(1)
            step(2)
            with pytest.raises(c4a.BudgetExceeded):
                step(3)
        assert c4a.budget_usage().tool_calls == 3
    status = ledger.run_status("parent")
    assert status is not None
    assert status.status == "step_limit"


def test_budget_survives_a_crash_and_resume(target: Target, tmp_path: Path) -> None:
    out = tmp_path / "world.txt"
    env = dict(target.env(), MAX_CALLS="3", AMOUNTS="1,2,3,4")
    killed = run_child(CHILD, "budget", "b-4", str(out), "kill_after_2", env=env)
    assert killed.returncode == -signal.SIGKILL
    resumed = run_child(CHILD, "budget", "b-4", str(out), env=env)
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout) == ["ok", "ok", "ok", "refused:step_limit"]
    assert out.read_text().splitlines() == ["charge 1", "charge 2", "charge 3"]


def test_two_workers_share_one_budget(target: Target, tmp_path: Path) -> None:
    out = tmp_path / "world.txt"
    env = target.env()
    runs = [
        (["budget", "b-5", str(out)], dict(env, MAX_CALLS="4", AMOUNTS=n))
        for n in ("1,2,3,4,5", "6,7,8,9,10")
    ]
    workers = forked.run_together(CHILD, runs, timeout=120)
    assert [w.returncode for w in workers] == [0, 0], [w.stderr for w in workers]
    outcomes = [outcome for w in workers for outcome in json.loads(w.stdout)]
    assert outcomes.count("ok") == 4  # not 4 each
    assert outcomes.count("refused:step_limit") == 6
    assert len(out.read_text().splitlines()) == 4


def test_budget_on_a_pydantic_ai_agent(target: Target, tmp_path: Path) -> None:
    ledger = c4a.init(target.open())
    outbox = Outbox(tmp_path / "out.jsonl")

    def send_email(to: str, body: str) -> str:
        """Email a customer."""
        return outbox.send(to, body)

    calls = [("send_email", {"to": f"u{i}@example.com", "body": "hi"}, f"c{i}") for i in range(3)]
    agent = Agent(scripted(calls), tools=[send_email], capabilities=[OnceOnly()])
    # The budget of an enclosing run, with the conversation's id: the agent's calls count.
    budget = c4a.Budget(max_tool_calls=2)
    with pytest.raises(c4a.BudgetExceeded) as caught, c4a.run("conv-b", budget=budget):
        agent.run_sync("go", conversation_id="conv-b")
    # The third call ended the run, as Pydantic AI's own limits do: it was not shown to the
    # model as a refusal to work around, and the two beside it finished.
    assert caught.value.reason == "step_limit"
    assert len(outbox.sent()) == 2
    status = ledger.run_status("conv-b")
    assert status is not None
    assert status.status == "step_limit"


def test_model_requests_and_cost_share_the_ledger_budget(ledger: c4a.Ledger) -> None:
    budget = c4a.Budget(max_model_requests=5, max_cost=0.02, token_prices=(3.0, 15.0))
    with c4a.run("b-model", budget=budget):
        first = c4a.count_model_request()
        assert first is not None
        assert first.model_requests == 1
        c4a.record_model_usage(1000, 200)  # 0.003 + 0.003
        assert c4a.budget_usage().cost == pytest.approx(0.006)
        assert not c4a.budget_usage().soft_reached
        c4a.count_model_request()
        c4a.record_model_usage(2000, 500)  # 0.006 + 0.0075: 0.0195 in all, past 80%
        usage = c4a.budget_usage()
        assert (usage.input_tokens, usage.output_tokens) == (3000, 700)
        assert usage.soft_reached
        note = usage.wrap_up_note()
        assert note is not None
        assert "do not start new work" in note
        c4a.record_model_usage(cost=0.001)  # an explicit cost wins over token prices
        with pytest.raises(c4a.BudgetExceeded) as caught:
            c4a.count_model_request()
        assert caught.value.reason == "budget"
        assert "spent 0.0205 of 0.02" in str(caught.value)

        @c4a.effect(name="refund")
        def refund(order: str) -> str:
            raise AssertionError("must not run past the cost ceiling")

        with pytest.raises(c4a.BudgetExceeded, match="budget"):
            refund("o-1")  # tool calls stop at the cost ceiling too
    status = ledger.run_status("b-model")
    assert status is not None
    assert status.status == "budget"


def test_model_request_limit_is_a_step_limit(ledger: c4a.Ledger) -> None:
    with c4a.run("b-req", budget=c4a.Budget(max_model_requests=2)):
        c4a.count_model_request()
        c4a.count_model_request()
        with pytest.raises(c4a.BudgetExceeded) as caught:
            c4a.count_model_request()
    assert caught.value.reason == "step_limit"
    assert caught.value.detail == "2 model requests"
    resumed = c4a.run("b-req", budget=c4a.Budget(max_model_requests=2))
    with resumed, pytest.raises(c4a.BudgetExceeded):  # a resume: the requests are still spent
        c4a.count_model_request()


def test_outside_a_budget_model_usage_is_not_counted(ledger: c4a.Ledger) -> None:
    assert c4a.count_model_request() is None
    c4a.record_model_usage(10, 10)
    with c4a.run("b-none"):
        assert c4a.count_model_request() is None


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_model_requests": 0}, "max_model_requests=...) must be a whole number"),
        ({"max_cost": -1}, "max_cost=...) must be a positive amount"),
        ({"token_prices": (3.0,)}, "per million tokens"),
        ({"token_prices": (3.0, -1.0)}, "per million tokens"),
    ],
)
def test_bad_budgets_are_refused(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(c4a.ConfigurationError, match=re.escape(message)):
        c4a.Budget(**kwargs)  # type: ignore[arg-type]


def test_negative_usage_is_refused(ledger: c4a.Ledger) -> None:
    with (
        c4a.run("b-neg", budget=c4a.Budget(max_cost=1.0)),
        pytest.raises(c4a.ConfigurationError, match="0 or more"),
    ):
        c4a.record_model_usage(-5, 0)


def race_three_calls(run_id: str, budget: c4a.Budget) -> int:
    """Three calls of a run at once, after a model request created its first counters."""
    done: list[int] = []

    @c4a.effect(name="step")
    def step(n: int) -> int:
        done.append(n)
        return n

    with c4a.run(run_id, budget=budget):
        c4a.count_model_request()
    barrier = threading.Barrier(3)

    def worker(n: int) -> None:
        with c4a.run(run_id, budget=budget), contextlib.suppress(c4a.BudgetExceeded):
            barrier.wait()
            step(n)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return len(done)


def test_parallel_first_tool_calls_cannot_pass_the_last_slot(ledger: c4a.Ledger) -> None:
    # On PostgreSQL a lock taken on the run's counter rows as a set missed a counter row the
    # previous lock holder created, and all three calls ran under max_tool_calls=2.
    budget = c4a.Budget(max_tool_calls=2)
    ran = [race_three_calls(f"race-{trial}", budget) for trial in range(5)]
    assert ran == [2] * 5
