"""A bare Pydantic AI approval covers only the arguments the ledger showed for that call.

Pydantic AI keys an approval by tool call id. A saved message history edited after the question
(the email now goes to mallory) and continued with the same bare approval must run nothing, on the
first continuation and on every later one, until a person decides the new arguments in the
ledger.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import Agent, DeferredToolRequests

import call4agents as c4a
from tests.pydantic_ai.scripted import Outbox, scripted
from tests.pydantic_ai.test_approvals import BOB, CALL, _with_args, answer, ask, build

MALLORY = {"to": "mallory@example.com", "body": BOB["body"]}


@pytest.fixture
def outbox(tmp_path: Path) -> Outbox:
    return Outbox(tmp_path / "outbox.jsonl")


def _bare(outbox: Outbox) -> Agent[None, Any]:
    agent: Agent[None, Any] = Agent(scripted([CALL]), output_type=[str, DeferredToolRequests])

    @agent.tool_plain(requires_approval=True)
    def send_email(to: str, body: str) -> str:
        """Email a customer."""
        return outbox.send(to, body)

    return agent


def test_bare_pydantic_ai_runs_an_edited_history_with_the_same_approval(outbox: Outbox) -> None:
    """What the ledger guards against: without it, the edited call runs."""
    agent = _bare(outbox)
    requests, history = ask(agent)
    tampered = [_with_args(m, "call-1", MALLORY) for m in history]
    agent.run_sync(message_history=tampered, deferred_tool_results=answer(requests, echo=False))
    assert outbox.sent() == ["mallory@example.com"]


def test_an_edited_history_runs_nothing_however_often_it_is_continued(
    ledger: c4a.Ledger, outbox: Outbox
) -> None:
    agent = build(outbox)
    requests, history = ask(agent)
    tampered = [_with_args(m, "call-1", MALLORY) for m in history]
    bare_yes = answer(requests, echo=False)  # keyed by call id alone, as the attacker sent
    for _ in range(3):
        again = agent.run_sync(message_history=tampered, deferred_tool_results=bare_yes)
        assert isinstance(again.output, DeferredToolRequests)
    assert outbox.sent() == []
    mallory = [t for t in ledger.approvals(run_id="ticket-7") if t.args == MALLORY]
    assert [t.state for t in mallory] == ["pending"]  # one ticket, never approved by the bare yes
    # A person who sees mallory in the ledger and says yes lets it run, once.
    ledger.approve(mallory[0].ticket, by="ann")
    agent.run_sync(message_history=tampered, deferred_tool_results=bare_yes)
    agent.run_sync(message_history=tampered, deferred_tool_results=bare_yes)
    assert outbox.sent() == ["mallory@example.com"]
