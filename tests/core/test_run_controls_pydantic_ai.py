"""Run controls on a real Pydantic AI agent with a scripted model: undo, finder, escalate.

Budgets and escalation from inside a tool are tested at length in
tests/pydantic_ai/test_run_controls.py; here they meet undo and the finder.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import Agent, capture_run_messages

import call4agents as c4a
from call4agents_pydantic_ai import OnceOnly
from tests.conftest import Target
from tests.pydantic_ai.scripted import Outbox, scripted

BOB = {"to": "bob@example.com", "body": "Your refund is on its way"}
ANN = {"to": "ann@example.com", "body": "Your order shipped"}


def agent_with(
    outbox: Outbox,
    recalled: list[str],
    tracker: list[str],
    *,
    lose_first_answer: bool = False,
    escalate_tickets: bool = False,
) -> Agent[None, str]:
    def send_email(to: str, body: str) -> dict[str, str]:
        """Email a customer."""
        outbox.send(to, body)
        return {"message_id": f"msg-{to}", "to": to}

    def recall(result: dict[str, str], *, to: str, body: str) -> str:
        recalled.append(f"{result['message_id']} ({body})")
        return "recalled"

    def open_ticket(title: str) -> str:
        """Open a ticket in a tracker that takes no idempotency key."""
        if escalate_tickets:
            c4a.escalate("tickets need a person today", what_remains=f"open ticket {title!r}")
        tracker.append(f"{title} {c4a.key_marker()}")
        if lose_first_answer and len(tracker) == 1:
            raise TimeoutError("the tracker created it, but its answer was lost")
        return tracker[-1]

    def find_ticket(title: str) -> str | None:
        return c4a.find_marked(tracker)

    model = scripted(
        [
            ("send_email", BOB, "call-1"),
            ("send_email", ANN, "call-2"),
            ("open_ticket", {"title": "refund o-7"}, "call-3"),
        ]
    )
    once = OnceOnly(
        tools={"send_email": {"undo": recall}, "open_ticket": {"find_existing": find_ticket}}
    )
    return Agent(model, tools=[send_email, open_ticket], capabilities=[once])


def test_undo_a_pydantic_ai_conversation(target: Target, tmp_path: Path) -> None:
    ledger = c4a.init(target.open())
    outbox, recalled, tracker = Outbox(tmp_path / "out.jsonl"), [], []  # type: ignore[var-annotated]
    agent = agent_with(outbox, recalled, tracker)
    agent.run_sync("handle it", conversation_id="conv-1")
    assert sorted(outbox.sent()) == ["ann@example.com", "bob@example.com"]
    assert len(tracker) == 1

    report = ledger.undo("conv-1")
    # Pydantic AI runs one response's tool calls concurrently: newest first is by ledger order.
    order = [r.key for r in ledger.effects("conv-1") if not r.tool.startswith("undo:")]
    assert [i.key for i in report.items] == order[::-1]
    assert sorted((i.tool, i.outcome) for i in report.items) == [
        ("open_ticket", "no_undo"),  # reported by name, never skipped silently
        ("send_email", "undone"),
        ("send_email", "undone"),
    ]
    assert sorted(recalled) == [
        "msg-ann@example.com (Your order shipped)",
        "msg-bob@example.com (Your refund is on its way)",
    ]
    assert report.status == "partly_undone"
    again = ledger.undo("conv-1")
    assert sorted(i.outcome for i in again.items) == ["already_undone", "already_undone", "no_undo"]
    assert len(recalled) == 2


def test_find_existing_on_a_pydantic_ai_tool(target: Target, tmp_path: Path) -> None:
    ledger = c4a.init(target.open())
    outbox, recalled, tracker = Outbox(tmp_path / "out.jsonl"), [], []  # type: ignore[var-annotated]
    agent = agent_with(outbox, recalled, tracker, lose_first_answer=True)
    # The tool's own timeout ends the run, as it would bare.
    with capture_run_messages() as messages, pytest.raises(TimeoutError, match="answer was lost"):
        agent.run_sync("handle it", conversation_id="conv-2")
    [ticket] = tracker  # created, but the tracker's answer was lost: the action is in doubt
    [record] = [r for r in ledger.effects("conv-2") if r.tool == "open_ticket"]
    assert record.state == "in_doubt"
    # The resumed run replays the model's calls: the finder settles the doubt with the ticket.
    agent.run_sync(message_history=messages[:2])
    assert tracker == [ticket]
    [found] = [r for r in ledger.effects("conv-2") if r.tool == "open_ticket"]
    assert found.state == "succeeded"
    assert found.result == ticket
    assert found.resolved_by == "check"
    # The run's other calls ran beside the ticket's; the timeout that ended the run may have
    # cancelled one of them mid-call, which leaves it in doubt (never re-sent) rather than sent.
    sent = outbox.sent()
    assert len(sent) == len(set(sent))  # nothing went twice
    emails = {r.args["to"]: r.state for r in ledger.effects("conv-2") if r.tool == "send_email"}
    assert all(state == "succeeded" for to, state in emails.items() if to in sent)
    assert all(state == "in_doubt" for to, state in emails.items() if to not in sent)


def test_escalate_a_pydantic_ai_conversation(target: Target, tmp_path: Path) -> None:
    c4a.init(target.open())
    outbox, recalled, tracker = Outbox(tmp_path / "out.jsonl"), [], []  # type: ignore[var-annotated]
    agent = agent_with(outbox, recalled, tracker)
    output = agent.run_sync("handle it", conversation_id="conv-3").output
    # The application's policy decides a person must finish: same run id as the conversation.
    with pytest.raises(c4a.Escalated) as caught, c4a.run("conv-3"):
        c4a.escalate(f"policy: a person signs off ({output[:10]})", what_remains="refund")
    done: list[dict[str, Any]] = caught.value.handoff.done
    assert sorted((d["tool"], d["args"].get("to", "")) for d in done) == [
        ("open_ticket", ""),
        ("send_email", "ann@example.com"),
        ("send_email", "bob@example.com"),
    ]
    ids = [d["external_ids"] for d in done if d["tool"] == "send_email"]
    assert {"message_id": "msg-bob@example.com"} in ids


def test_escalate_from_a_tool_then_undo_the_conversation(target: Target, tmp_path: Path) -> None:
    ledger = c4a.init(target.open())
    outbox, recalled, tracker = Outbox(tmp_path / "out.jsonl"), [], []  # type: ignore[var-annotated]
    agent = agent_with(outbox, recalled, tracker, escalate_tickets=True)
    # The ticket tool escalates: the run ends there, no `with c4a.run(...)` around the agent.
    with pytest.raises(c4a.Escalated) as caught:
        agent.run_sync("handle it", conversation_id="conv-4")
    handoff = caught.value.handoff
    assert sorted(d["external_ids"]["message_id"] for d in handoff.done) == [
        "msg-ann@example.com",
        "msg-bob@example.com",
    ]
    assert [f["tool"] for f in handoff.failed] == ["open_ticket"]
    assert tracker == []
    # The person taking over reverses what the agent did; the hand-off stays on record.
    report = ledger.undo("conv-4")
    assert report.status == "undone"  # the failed ticket did not act: nothing to reverse
    assert sorted(i.tool for i in report.items) == ["send_email", "send_email"]
    assert len(recalled) == 2
    kept = ledger.handoff("conv-4")
    assert kept is not None
    assert kept.reason == "tickets need a person today"
    status = ledger.run_status("conv-4")
    assert status is not None
    assert status.status == "undone"
