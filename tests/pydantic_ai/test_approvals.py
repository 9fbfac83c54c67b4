"""Approvals through Pydantic AI's deferred tools, bound in the ledger to the arguments that run."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import (
    Agent,
    DeferredToolRequests,
    DeferredToolResults,
    ToolApproved,
    ToolDenied,
)
from pydantic_ai.messages import ModelMessage, ModelResponse

import call4agents as c4a
from call4agents_pydantic_ai import OnceOnly
from tests import forked
from tests.conftest import Target, run_child
from tests.pydantic_ai.scripted import Outbox, child_env, returns_in, scripted

BOB = {"to": "bob@example.com", "body": "Your refund of 500 EUR is approved"}
CALL = ("send_email", BOB, "call-1")


def build(outbox: Outbox, *turns: Any, requires_approval: bool = False) -> Agent[None, Any]:
    once_only = OnceOnly(tools={} if requires_approval else {"send_email": {"approval": True}})
    agent: Agent[None, Any] = Agent(
        scripted(*(turns or ([CALL],))),
        output_type=[str, DeferredToolRequests],
        capabilities=[once_only],
    )

    @agent.tool_plain(requires_approval=requires_approval)
    def send_email(to: str, body: str) -> str:
        """Email a customer."""
        return outbox.send(to, body)

    return agent


def ask(
    agent: Agent[None, Any], conversation: str = "ticket-7"
) -> tuple[DeferredToolRequests, Any]:
    result = agent.run_sync("Tell Bob", conversation_id=conversation)
    assert isinstance(result.output, DeferredToolRequests)
    return result.output, result.all_messages()


def answer(
    requests: DeferredToolRequests, decision: Any = True, *, echo: bool = True, by: str = "ann"
) -> DeferredToolResults:
    [call] = requests.approvals
    return DeferredToolResults(
        approvals={call.tool_call_id: decision},
        metadata=requests.metadata if echo else {},
        answered_by={call.tool_call_id: by},
    )


def outcome(messages: list[ModelMessage]) -> list[list[Any]]:
    final = messages[-1]
    assert isinstance(final, ModelResponse)
    result: list[list[Any]] = json.loads(final.text or "[]")
    return result


@pytest.fixture
def outbox(tmp_path: Path) -> Outbox:
    return Outbox(tmp_path / "outbox.jsonl")


def test_a_call_needing_approval_ends_the_run_with_its_exact_call_and_ticket(
    ledger: c4a.Ledger, outbox: Outbox
) -> None:
    requests, _ = ask(build(outbox))
    [call] = requests.approvals
    shown = requests.metadata[call.tool_call_id]["call4agents"]
    assert shown["ticket"].startswith("apr_")
    assert (shown["tool"], shown["args"], shown["run_id"]) == ("send_email", BOB, "ticket-7")
    assert shown["state"] == "pending"
    assert outbox.sent() == []
    [pending] = ledger.approvals(run_id="ticket-7", state="pending")
    assert pending.ticket == shown["ticket"]


@pytest.mark.parametrize("echo", [True, False], ids=["metadata-echoed", "no-metadata"])
def test_the_same_approved_continuation_sent_twice_runs_the_tool_once(
    ledger: c4a.Ledger, outbox: Outbox, echo: bool
) -> None:
    agent = build(outbox)
    requests, history = ask(agent)
    results = answer(requests, echo=echo)
    first = agent.run_sync(message_history=history, deferred_tool_results=results)
    again = agent.run_sync(message_history=history, deferred_tool_results=results)
    assert outbox.sent() == ["bob@example.com"]
    sent = [["send_email", "sent to bob@example.com", "success"]]
    assert outcome(first.all_messages()) == outcome(again.all_messages()) == sent
    [ticket] = ledger.approvals(run_id="ticket-7")
    assert (ticket.state, ticket.decided_by) == ("spent", "ann")


@pytest.mark.parametrize("echo", [True, False], ids=["metadata-echoed", "no-metadata"])
def test_two_calls_of_one_action_get_their_own_answers(
    ledger: c4a.Ledger, outbox: Outbox, echo: bool
) -> None:
    # Under a key= naming one email per recipient, the model asks for two bodies in one turn;
    # the person says yes to one and no to the other. Each answer stays with the call it showed.
    first, second = dict(BOB, body="refund approved"), dict(BOB, body="refund denied")
    once = OnceOnly(tools={"send_email": {"approval": True, "key": lambda to, body: to}})
    agent: Agent[None, Any] = Agent(
        scripted([("send_email", first, "call-1"), ("send_email", second, "call-2")]),
        output_type=[str, DeferredToolRequests],
        capabilities=[once],
    )

    @agent.tool_plain
    def send_email(to: str, body: str) -> str:
        """Email a customer."""
        return outbox.send(to, body)

    requests, history = ask(agent)
    results = DeferredToolResults(
        approvals={"call-1": True, "call-2": False},
        metadata=requests.metadata if echo else {},
        answered_by={"call-1": "ann", "call-2": "ann"},
    )
    agent.run_sync(message_history=history, deferred_tool_results=results)
    assert [json.loads(line)["body"] for line in outbox.path.read_text().splitlines()] == [
        "refund approved"
    ]
    states = {t.args["body"]: t.state for t in ledger.approvals(run_id="ticket-7")}
    assert states == {"refund approved": "spent", "refund denied": "denied"}


def test_override_args_is_a_yes_to_the_edited_call(ledger: c4a.Ledger, outbox: Outbox) -> None:
    agent = build(outbox)
    requests, history = ask(agent)
    edited = {"to": "carol@example.com", "body": BOB["body"]}
    results = answer(requests, ToolApproved(override_args=edited))
    done = agent.run_sync(message_history=history, deferred_tool_results=results)
    agent.run_sync(message_history=history, deferred_tool_results=results)  # sent twice
    assert outbox.sent() == ["carol@example.com"]
    assert outcome(done.all_messages()) == [["send_email", "sent to carol@example.com", "success"]]
    by_state = {t.state: t for t in ledger.approvals(run_id="ticket-7")}
    assert by_state["spent"].args == edited
    assert by_state["spent"].decided_by == "ann"
    assert "override_args" in (by_state["spent"].reason or "")
    assert by_state["pending"].args == BOB  # the shown call was not approved as it stood


@pytest.mark.parametrize("echo", [True, False], ids=["metadata-echoed", "no-metadata"])
def test_a_history_edited_after_the_question_runs_nothing_and_asks_again(
    ledger: c4a.Ledger, outbox: Outbox, echo: bool
) -> None:
    agent = build(outbox)
    requests, history = ask(agent)
    mallory = {"to": "mallory@example.com", "body": BOB["body"]}
    tampered = [_with_args(m, "call-1", mallory) for m in history]
    again = agent.run_sync(
        message_history=tampered, deferred_tool_results=answer(requests, echo=echo)
    )
    assert outbox.sent() == []
    assert isinstance(again.output, DeferredToolRequests)
    [asked] = again.output.approvals
    shown = again.output.metadata[asked.tool_call_id]["call4agents"]
    assert shown["args"] == mallory
    assert shown["ticket"] != requests.metadata["call-1"]["call4agents"]["ticket"]
    assert {t.state for t in ledger.approvals(run_id="ticket-7")} == {"pending"}


def test_a_no_is_recorded_and_refuses_the_same_call_later(
    ledger: c4a.Ledger, outbox: Outbox
) -> None:
    agent = build(outbox, [CALL], [("send_email", BOB, "call-2")])
    requests, history = ask(agent)
    denied = agent.run_sync(
        message_history=history,
        deferred_tool_results=answer(requests, ToolDenied("Not before the audit")),
    )
    assert outcome(denied.all_messages()) == [["send_email", "Not before the audit", "denied"]]
    [ticket] = ledger.approvals(run_id="ticket-7")
    assert (ticket.state, ticket.decided_by, ticket.reason) == (
        "denied",
        "ann",
        "Not before the audit",
    )
    # The model tries the very same email again in a later turn: the ledger's "no" stands.
    later = agent.run_sync("Try again", message_history=denied.all_messages())
    assert not isinstance(later.output, DeferredToolRequests)
    [[tool, content, result]] = returns_in(later.new_messages())
    assert (tool, result) == ("send_email", "denied")
    assert "denied by ann" in content
    assert outbox.sent() == []


def test_a_yes_given_outside_the_run_lets_the_resumed_call_run(
    ledger: c4a.Ledger, outbox: Outbox
) -> None:
    agent = build(outbox)
    requests, history = ask(agent)
    ledger.approve(requests.metadata["call-1"]["call4agents"]["ticket"], by="ops")
    resumed = agent.run_sync(message_history=history)  # no DeferredToolResults: the ledger's yes
    assert outcome(resumed.all_messages()) == [["send_email", "sent to bob@example.com", "success"]]
    assert outbox.sent() == ["bob@example.com"]


def test_a_requires_approval_tool_keeps_pydantic_ai_approvals_and_runs_once(
    ledger: c4a.Ledger, outbox: Outbox
) -> None:
    agent = build(outbox, requires_approval=True)
    requests, history = ask(agent)
    results = answer(requests)
    agent.run_sync(message_history=history, deferred_tool_results=results)
    agent.run_sync(message_history=history, deferred_tool_results=results)
    assert outbox.sent() == ["bob@example.com"]


def test_an_approval_callable_asks_only_when_it_says_so(ledger: c4a.Ledger, outbox: Outbox) -> None:
    small = {"to": "bob@example.com", "body": "hi"}
    once_only = OnceOnly(tools={"send_email": {"approval": lambda to, body: len(body) > 10}})
    agent: Agent[None, Any] = Agent(
        scripted([("send_email", small, "c1")]),
        output_type=[str, DeferredToolRequests],
        capabilities=[once_only],
    )
    agent.tool_plain(outbox.send, name="send_email")
    result = agent.run_sync("hi", conversation_id="t")
    assert isinstance(result.output, str)
    assert outbox.sent() == ["bob@example.com"]


def _with_args(message: ModelMessage, call_id: str, args: dict[str, Any]) -> ModelMessage:
    if not isinstance(message, ModelResponse):
        return message
    parts = [
        replace(p, args=json.dumps(args)) if getattr(p, "tool_call_id", None) == call_id else p
        for p in message.parts
    ]
    return replace(message, parts=parts)


CHILD = Path(__file__).with_name("approval_child.py")


def test_two_workers_continuing_the_same_approval_at_once_run_the_tool_once(
    target: Target, tmp_path: Path
) -> None:
    env = child_env(target.env())
    asked = run_child(CHILD, "ask", str(tmp_path), env=env)
    assert asked.returncode == 0, asked.stderr
    (tmp_path / "workers").write_text("w1 w2")
    runs = [(["continue", str(tmp_path), name], env) for name in ("w1", "w2")]
    workers = forked.run_together(CHILD, runs, timeout=120)
    assert [w.returncode for w in workers] == [0, 0], [w.stderr for w in workers]
    sent = [["send_email", "sent to bob@example.com", "success"]]
    assert [json.loads(w.stdout) for w in workers] == [sent, sent]
    assert Outbox(tmp_path / "outbox.jsonl").sent() == ["bob@example.com"]
    [ticket] = target.open().approvals(run_id="ticket-9")
    assert (ticket.state, ticket.decided_by) == ("spent", "ann")
