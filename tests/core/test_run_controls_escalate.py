"""Escalation: a legitimate ending whose hand-off lists exactly what was done and what remains."""

from __future__ import annotations

import json
from typing import Any

import pytest

import call4agents as c4a
from call4agents.cli import main
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

    # The action list keeps its own shape for scripts that read it.
    assert cli(target, "show", "ticket-9", "--json") == 0
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
