"""Every public error survives ``pickle``: its type, message and attributes come back whole.

Job queues (a Celery result backend), process pools and durable engines pickle an error to hand it
to another process. Before, the keyword-only constructors made unpickling fail
(``EffectInDoubt.__init__() takes 1 positional argument but 2 were given``), so the caller got a
bare base error or a ``TypeError`` text, and lost the key a person needs for
``call4agents resolve``.
"""

from __future__ import annotations

import multiprocessing
import pickle
from typing import Any

import pytest

import call4agents as c4a
from call4agents.controls.replay import ReplayMismatch
from call4agents.engine.approvals import ApprovalRequest

KEY = "k" * 64
REQUEST = ApprovalRequest(
    ticket="t-1",
    run_id="r",
    tool="wire",
    key=KEY,
    args={"amount": 5},
    state="waiting",
    requested_at=1.0,
    expires_at=2.0,
)

ERRORS: dict[str, c4a.Call4AgentsError] = {
    "base": c4a.Call4AgentsError("something went wrong"),
    "ledger": c4a.LedgerError("ledger is newer"),
    "configuration": c4a.ConfigurationError("bad setup"),
    "unstable-arguments": c4a.UnstableArguments("pay", "items[2].price", "is a float NaN"),
    "in-doubt": c4a.EffectInDoubt(key=KEY, run_id="r", tool="pay", reason="crashed", attempt=2),
    "in-progress": c4a.EffectInProgress(
        key=KEY, run_id="r", tool="pay", owner="host:42", waited=1.5
    ),
    "result-not-stored": c4a.ResultNotStored(key=KEY, run_id="r", tool="pay", why="too large"),
    "result-pruned": c4a.ResultPruned(key=KEY, run_id="r", tool="pay"),
    "approval-required": c4a.ApprovalRequired(
        "needs a yes", key=KEY, run_id="r", tool="wire", request=REQUEST, shown=REQUEST
    ),
    "approval-denied": c4a.ApprovalDenied(
        "said no", key=KEY, run_id="r", tool="wire", reason="denied by ann"
    ),
    "budget-exceeded": c4a.BudgetExceeded(
        run_id="r", tool="pay", reason="step_limit", detail="3 of 3 calls"
    ),
    "replay-mismatch": ReplayMismatch("pay was not recorded"),
}


def test_every_public_error_is_listed_here() -> None:
    public = {
        getattr(c4a, name)
        for name in c4a.__all__
        if isinstance(getattr(c4a, name), type)
        and issubclass(getattr(c4a, name), c4a.Call4AgentsError)
    }
    assert public <= {type(error) for error in ERRORS.values()}


def _same(back: BaseException, error: BaseException) -> None:
    assert type(back) is type(error)
    assert str(back) == str(error)
    assert back.args == error.args
    assert vars(back) == vars(error)


@pytest.mark.parametrize("error", ERRORS.values(), ids=ERRORS.keys())
def test_an_error_round_trips_through_pickle(error: c4a.Call4AgentsError) -> None:
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        _same(pickle.loads(pickle.dumps(error, protocol)), error)


def test_an_in_doubt_error_raised_by_the_engine_keeps_its_key(sqlite_target: Any) -> None:
    c4a.init(sqlite_target.open())

    @c4a.effect
    def pay(amount: int) -> str:
        raise c4a.OutcomeUnknown("provider answered 502")

    with c4a.run("r"):
        with pytest.raises(c4a.OutcomeUnknown):
            pay(5)
        with pytest.raises(c4a.EffectInDoubt) as info:
            pay(5)
    back = pickle.loads(pickle.dumps(info.value))
    _same(back, info.value)
    assert (back.key, back.run_id, back.tool) == (info.value.key, "r", info.value.tool)


def test_an_approval_error_raised_by_the_engine_keeps_its_ticket(sqlite_target: Any) -> None:
    c4a.init(sqlite_target.open())

    @c4a.effect(name="wire", approval=True)
    def wire(amount: int) -> str:
        return "sent"

    with c4a.run("r"), pytest.raises(c4a.ApprovalRequired) as info:
        wire(5)
    back = pickle.loads(pickle.dumps(info.value))
    _same(back, info.value)
    assert back.request.ticket == info.value.request.ticket


def _raise(name: str) -> None:
    raise ERRORS[name]


@pytest.fixture(scope="module")
def pool() -> Any:
    # A fresh interpreter per child: the error crosses a real process boundary as pickled bytes.
    with multiprocessing.get_context("spawn").Pool(1) as workers:
        yield workers


@pytest.mark.parametrize("name", ERRORS.keys())
def test_an_error_raised_in_a_pool_child_reaches_the_parent_whole(pool: Any, name: str) -> None:
    # An error the parent cannot unpickle kills the pool's result thread and the call never
    # returns; the generous bound turns that hang into a failure.
    with pytest.raises(type(ERRORS[name])) as info:
        pool.apply_async(_raise, (name,)).get(timeout=120)
    _same(info.value, ERRORS[name])
