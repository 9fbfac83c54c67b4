"""Nested budgets: a sub-agent with limits of its own still spends every enclosing run's budget."""

from __future__ import annotations

import contextlib
import threading

import pytest
from sqlalchemy import select, update

import call4agents as c4a
from call4agents.storage.tables import run_counters


def counters(ledger: c4a.Ledger, run_id: str) -> dict[str, float]:
    with ledger.engine.connect() as conn:
        rows = conn.execute(
            select(run_counters.c.name, run_counters.c.value).where(
                run_counters.c.run_id == run_id,
                run_counters.c.name != "started_at",
                ~run_counters.c.name.like("run.%"),  # the run's own summary, not its budget
            )
        ).all()
    return {name: float(value) for name, value in rows}


def make_step() -> tuple[c4a.Effect[..., int], list[int]]:
    done: list[int] = []

    @c4a.effect(name="step")
    def step(n: int) -> int:
        done.append(n)
        return n

    return step, done


def test_the_parents_limit_stops_a_child_with_its_own_budget(ledger: c4a.Ledger) -> None:
    step, done = make_step()
    with c4a.run("parent", budget=c4a.Budget(max_tool_calls=3)):
        step(1)
        # A sub-agent with its own, larger budget: it may not spend past its parent's.
        with c4a.run("child", budget=c4a.Budget(max_tool_calls=10)):
            step(1)
            step(2)
            with pytest.raises(c4a.BudgetExceeded) as caught:
                step(3)
            assert c4a.budget_usage().tool_calls == 2  # the child's own count
    assert caught.value.run_id == "parent"  # the cut names the budget that was spent
    assert done == [1, 1, 2]
    assert counters(ledger, "parent") == {"tool_calls": 3, "tool:step": 3}
    assert counters(ledger, "child") == {"tool_calls": 2, "tool:step": 2}
    parent, child = ledger.run_status("parent"), ledger.run_status("child")
    assert parent is not None
    assert parent.status == "step_limit"
    assert child is None  # the child did not hit its own limits


def test_the_childs_own_limit_still_applies(ledger: c4a.Ledger) -> None:
    step, done = make_step()
    with c4a.run("parent", budget=c4a.Budget(max_tool_calls=5)):
        with c4a.run("child", budget=c4a.Budget(max_calls_per_tool=1)):
            step(1)
            with pytest.raises(c4a.BudgetExceeded) as caught:
                step(2)
        step(3)  # the parent's allowance is not used up by the child's refused call
    assert caught.value.run_id == "child"
    assert caught.value.detail == "1 calls of step"
    assert done == [1, 3]
    assert counters(ledger, "parent") == {"tool_calls": 2, "tool:step": 2}


def test_every_level_counts_down_three_deep(ledger: c4a.Ledger) -> None:
    step, _ = make_step()
    with (
        c4a.run("top", budget=c4a.Budget(max_calls_per_tool=2)),
        c4a.run("middle", budget=c4a.Budget(max_tool_calls=50)),
        c4a.run("bottom"),  # no budget of its own: the middle's (and so the top's) applies
    ):
        step(1)
        step(2)
        with pytest.raises(c4a.BudgetExceeded) as caught:
            step(3)
    assert caught.value.run_id == "top"
    assert counters(ledger, "middle") == {"tool_calls": 2, "tool:step": 2}
    assert counters(ledger, "bottom") == {}


def test_model_requests_and_cost_count_against_the_parent(ledger: c4a.Ledger) -> None:
    parent_budget = c4a.Budget(max_model_requests=2, max_cost=1.0, token_prices=(1.0, 1.0))
    with c4a.run("parent-m", budget=parent_budget):
        with c4a.run("child-m", budget=c4a.Budget(max_model_requests=10)):
            c4a.count_model_request()
            c4a.record_model_usage(1000, 0, cost=0.25)
            c4a.count_model_request()
            with pytest.raises(c4a.BudgetExceeded) as caught:
                c4a.count_model_request()
        assert c4a.budget_usage().model_requests == 2
        assert c4a.budget_usage().cost == pytest.approx(0.25)
    assert caught.value.run_id == "parent-m"
    assert caught.value.detail == "2 model requests"
    assert counters(ledger, "child-m")["model_requests"] == 2


def test_the_parents_deadline_stops_the_child(ledger: c4a.Ledger) -> None:
    step, done = make_step()
    with c4a.run("parent-d", budget=c4a.Budget(deadline=3600)):
        # An hour passes (moved in the ledger rather than waited for).
        with ledger.engine.begin() as conn:
            conn.execute(
                update(run_counters)
                .where(run_counters.c.run_id == "parent-d", run_counters.c.name == "started_at")
                .values(value=run_counters.c.value - 3601)
            )
        with (
            c4a.run("child-d", budget=c4a.Budget(max_tool_calls=5)),
            pytest.raises(c4a.BudgetExceeded) as caught,
        ):
            step(1)
    assert (caught.value.run_id, caught.value.reason) == ("parent-d", "deadline")
    assert done == []


def test_the_same_run_entered_again_is_counted_once(ledger: c4a.Ledger) -> None:
    # An integration entering the run's own scope again (one OnceOnly budget inside the
    # caller's c4a.run of the same id): both limits apply, the counters move once.
    step, _ = make_step()
    with (
        c4a.run("same", budget=c4a.Budget(max_tool_calls=5)),
        c4a.run("same", budget=c4a.Budget(max_calls_per_tool=2)),
    ):
        step(1)
        step(2)
        with pytest.raises(c4a.BudgetExceeded, match="2 calls of step"):
            step(3)
    assert counters(ledger, "same") == {"tool_calls": 2, "tool:step": 2}


def test_children_racing_for_the_parents_last_calls(ledger: c4a.Ledger) -> None:
    # Three sub-agents at once, each with a budget of its own, share the parent's two calls:
    # the parent's counters are locked in each claim's transaction, so only two can run.
    step, done = make_step()
    parent = c4a.Budget(max_tool_calls=2)
    with c4a.run("parent-r", budget=parent):
        c4a.count_model_request()  # the parent's counters exist before the race
    barrier = threading.Barrier(3)

    def child(n: int) -> None:
        with (
            c4a.run("parent-r", budget=parent),
            c4a.run(f"child-r{n}", budget=c4a.Budget(max_tool_calls=5)),
            contextlib.suppress(c4a.BudgetExceeded),
        ):
            barrier.wait()
            step(n)

    threads = [threading.Thread(target=child, args=(n,)) for n in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(done) == 2
    assert counters(ledger, "parent-r")["tool_calls"] == 2


def test_a_sub_agent_is_told_to_wrap_up_when_its_parents_budget_is_nearly_spent(
    ledger: c4a.Ledger,
) -> None:
    step, _ = make_step()
    with c4a.run("parent", budget=c4a.Budget(max_tool_calls=5, max_model_requests=10, soft=0.8)):
        step(1)
        step(2)
        step(3)
        with c4a.run("child", budget=c4a.Budget(max_tool_calls=100, max_model_requests=100)):
            usage = c4a.budget_usage()
            assert (usage.tool_calls, usage.soft_reached) == (0, False)
            step(4)  # the parent's fourth of five: 80%
            usage = c4a.budget_usage()
            assert usage.run_id == "child"
            assert usage.tool_calls == 1  # its own count is far from its own limit
            assert [outer.run_id for outer in usage.enclosing] == ["parent"]
            assert usage.soft_reached
            assert "80% of a limit is spent" in (usage.wrap_up_note() or "")
            # A model request counted in the child reports the parent's share too.
            counted = c4a.count_model_request()
            assert counted is not None
            assert counted.model_requests == 1
            assert counted.enclosing[0].model_requests == 1
            assert "80% of a limit" in (counted.wrap_up_note() or "")
    with c4a.run("other", budget=c4a.Budget(max_tool_calls=100, soft=0.8)):
        step(5)
        assert not c4a.budget_usage().soft_reached  # no enclosing run: its own figures alone
        assert c4a.budget_usage().enclosing == ()


def test_runs_left_open_are_bounded_and_the_oldest_goes_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from call4agents.engine import run_notes

    monkeypatch.setattr(run_notes, "_KEPT", 3)
    monkeypatch.setattr(run_notes, "_open", type(run_notes._open)())
    for n in range(5):  # never left: a thread that waits forever, say
        assert run_notes.enter(f"left-open-{n}", None, None) is not None
    assert [run_notes.is_open(f"left-open-{n}") for n in range(5)] == [
        False,
        False,
        True,
        True,
        True,
    ]
