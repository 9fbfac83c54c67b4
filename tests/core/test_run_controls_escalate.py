"""Escalation: a legitimate ending whose hand-off lists exactly what was done and what remains."""

from __future__ import annotations

import json
from typing import Any

import pytest

import call4agents as c4a
from call4agents.facade.cli import main
from tests.conftest import Target


def cli(target: Target, *argv: str) -> int:
    full = [*argv, "--url", target.url, *(["--schema", target.schema] if target.schema else [])]
    return main(full)


def refund_agent(ledger: c4a.Ledger) -> c4a.Escalated:
    @c4a.effect(name="lookup_order", kind="read")
    def lookup_order(order: str) -> dict[str, Any]:
        return {"order": order, "total": 120}

    @c4a.effect(name="refund")
    def refund(order: str, amount: int) -> dict[str, Any]:
        return {"refund_id": "re_1", "amount": amount}

    @c4a.effect(name="email")
    def email(to: str) -> str:
        return "sent"

    @c4a.effect(name="restock")
    def restock(order: str) -> None:
        raise c4a.OutcomeUnknown("the warehouse API hung up")

    with c4a.run("ticket-9"):
        lookup_order("o-7")
        refund("o-7", 120)
        email("bob@example.com")
        with pytest.raises(c4a.OutcomeUnknown):
            restock("o-7")
        try:
            c4a.escalate(
                "the refund exceeds what an agent may approve",
                what_remains=["approve the extra 30 EUR goodwill credit", "email Bob the outcome"],
                blocking_fact="goodwill credits over 20 EUR need a team lead",
            )
        except c4a.Escalated as escalated:
            return escalated
    raise AssertionError("escalate() must raise Escalated")


def test_escalate_records_the_exact_actions(ledger: c4a.Ledger) -> None:
    escalated = refund_agent(ledger)
    handoff = escalated.handoff
    assert escalated.run_id == handoff.run_id == "ticket-9"
    assert not isinstance(escalated, c4a.Call4AgentsError)  # an ending, not an error
    assert handoff.reason == "the refund exceeds what an agent may approve"
    assert handoff.blocking_fact == "goodwill credits over 20 EUR need a team lead"
    assert [(d["tool"], d["args"], d["result"]) for d in handoff.done] == [
        ("refund", {"order": "o-7", "amount": 120}, {"refund_id": "re_1", "amount": 120}),
        ("email", {"to": "bob@example.com"}, "sent"),
    ]  # the read-only lookup is not an action
    assert handoff.done[0]["external_ids"] == {"refund_id": "re_1"}
    assert [(d["tool"], d["why"]) for d in handoff.in_doubt] == [
        ("restock", "OutcomeUnknown: the warehouse API hung up")
    ]
    assert handoff.what_remains == [
        "approve the extra 30 EUR goodwill credit",
        "email Bob the outcome",
    ]
    status = ledger.run_status("ticket-9")
    assert status is not None
    assert status.status == "escalated"
    assert ledger.handoff("ticket-9") == handoff
    assert ledger.handoff("no-such-run") is None


def test_show_prints_the_handoff_and_json_gives_it(
    ledger: c4a.Ledger, target: Target, capsys: pytest.CaptureFixture[str]
) -> None:
    refund_agent(ledger)
    assert cli(target, "show", "ticket-9") == 0
    out = capsys.readouterr().out
    assert "Run ticket-9 was escalated: the refund exceeds what an agent may approve" in out
    assert "Blocking fact: goodwill credits over 20 EUR need a team lead" in out
    assert "  - refund " in out
    assert "external ids: refund_id=re_1" in out
    assert "In doubt (check before doing them again):" in out
    assert "  - email Bob the outcome" in out

    assert cli(target, "show", "ticket-9", "--handoff", "--json") == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["status"] == "escalated"
    assert doc["run_id"] == "ticket-9"
    assert [d["tool"] for d in doc["done"]] == ["refund", "email"]
    assert [d["tool"] for d in doc["in_doubt"]] == ["restock"]

    # The whole run as one document: its actions, its ending and the same hand-off.
    assert cli(target, "show", "ticket-9", "--json") == 0
    whole = json.loads(capsys.readouterr().out)
    assert whole["handoff"] == doc
    assert whole["ending"]["status"] == "escalated"
    assert [a["tool"] for a in whole["actions"]] == ["refund", "email", "restock"]
    # The action list alone keeps its old shape for scripts that read it.
    assert cli(target, "show", "ticket-9", "--json", "--actions") == 0
    assert isinstance(json.loads(capsys.readouterr().out), list)
    assert cli(target, "show", "other", "--handoff") == 1
    assert "was not escalated" in capsys.readouterr().err


def test_escalate_from_inside_a_tool_and_with_no_actions(
    ledger: c4a.Ledger, target: Target, capsys: pytest.CaptureFixture[str]
) -> None:
    @c4a.effect(name="wire_money")
    def wire_money(amount: int) -> str:
        if amount > 1000:
            c4a.escalate("amount over the wire limit", blocking_fact=f"{amount} > 1000")
        return "wired"

    with pytest.raises(c4a.Escalated) as caught, c4a.run("wire-1"):
        wire_money(5000)
    [failed] = caught.value.handoff.failed  # the tool escalated instead of acting
    assert failed["tool"] == "wire_money"
    assert "Escalated" in failed["why"]
    assert caught.value.handoff.done == []

    with pytest.raises(c4a.Escalated), c4a.run("empty-1"):
        c4a.escalate("nothing I can do", what_remains="call the customer")
    assert cli(target, "show", "empty-1") == 0
    out = capsys.readouterr().out
    assert "Run empty-1: no actions" in out
    assert "  - call the customer" in out


def test_escalate_needs_a_run_and_a_reason(ledger: c4a.Ledger) -> None:
    with pytest.raises(c4a.ConfigurationError, match="needs a run"):
        c4a.escalate("why")
    with pytest.raises(c4a.ConfigurationError, match="needs a reason"), c4a.run("r"):
        c4a.escalate(" ")


def test_escalate_on_policy_turns_outcomes_into_handoffs(ledger: c4a.Ledger) -> None:
    sent: list[str] = []

    @c4a.effect(name="wire", escalate_on=("in_doubt", "denied", "budget"), approval=True)
    def wire(amount: int) -> dict[str, Any]:
        sent.append(f"wire {amount}")
        if amount == 13:
            raise TimeoutError("the bank did not answer")
        return {"transfer_id": f"t-{amount}"}

    # A denied approval: the run ends with a hand-off, not a refusal for the model to work around.
    with c4a.run("pol-denied"):
        with pytest.raises(c4a.ApprovalRequired) as asked:
            wire(5)
        ledger.deny(asked.value.request.ticket, by="ops@example.com", reason="too large")
        with pytest.raises(c4a.Escalated) as caught:
            wire(5)
    handoff = caught.value.handoff
    assert handoff.reason == "a person denied wire"
    assert handoff.blocking_fact == "denied by ops@example.com: too large"
    assert isinstance(caught.value.__cause__, c4a.ApprovalDenied)

    # In doubt: the timeout escalates at once, and so does a later repeat.
    with c4a.run("pol-doubt"):
        with pytest.raises(c4a.ApprovalRequired) as asked:
            wire(13)
        ledger.approve(asked.value.request.ticket, by="ops@example.com")
        with pytest.raises(c4a.Escalated) as caught:
            wire(13)
        assert isinstance(caught.value.__cause__, TimeoutError)
        with pytest.raises(c4a.Escalated) as again:
            wire(13)
    assert isinstance(again.value.__cause__, c4a.EffectInDoubt)
    assert [i["args"] for i in again.value.handoff.in_doubt] == [{"amount": 13}]
    assert "call4agents resolve" in again.value.handoff.what_remains[0]
    assert sent == ["wire 13"]  # never re-run

    # A budget cut: the hand-off says which limit and lists what remains.
    @c4a.effect(name="notify", escalate_on="budget")
    def notify(to: str) -> str:
        return "sent"

    with c4a.run("pol-budget", budget=c4a.Budget(max_tool_calls=1)):
        notify("a")
        with pytest.raises(c4a.Escalated) as caught:
            notify("b")
    assert caught.value.handoff.reason == "the run hit its step limit"
    assert caught.value.handoff.what_remains == ['notify {"to":"b"}']
    status = ledger.run_status("pol-budget")
    assert status is not None
    assert status.status == "escalated"
    assert status.details["budget"]["reason"] == "step_limit"  # the cut is kept beside it


def test_escalate_on_refuses_unknown_outcomes() -> None:
    with pytest.raises(c4a.ConfigurationError, match=r"escalate_on=\['failed'\] is not under"):
        c4a.EffectOptions(escalate_on=("failed",))
