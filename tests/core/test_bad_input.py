"""Values a user can pass by mistake get one clear Call4AgentsError, with nothing written or run."""

from __future__ import annotations

import pytest

import call4agents as c4a


@pytest.mark.parametrize("value", [10**5000, -(10**5000)], ids=["huge", "huge-negative"])
def test_a_top_level_int_too_long_to_write_is_refused_like_a_nested_one(
    ledger: c4a.Ledger, value: int
) -> None:
    ran: list[int] = []

    @c4a.effect(ledger=ledger)
    def pay(amount: int) -> None:
        ran.append(amount)

    with c4a.run("r", ledger=ledger), pytest.raises(c4a.UnstableArguments) as refused:
        pay(value)
    assert "argument 'amount' is an integer too long" in str(refused.value)
    assert ran == []
    assert ledger.effects("r") == []


@pytest.mark.parametrize("run_id", ["job-\udcff", "job-\x00-1"], ids=["lone-surrogate", "nul"])
def test_a_run_id_no_database_can_store_is_refused(ledger: c4a.Ledger, run_id: str) -> None:
    with pytest.raises(c4a.ConfigurationError, match="NUL or a lone surrogate"):
        c4a.run(run_id, ledger=ledger)
    assert ledger.effects() == []
