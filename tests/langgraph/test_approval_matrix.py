"""The approval matrix for LangGraph, in real worker processes on SQLite and PostgreSQL.

A paused ``send_email(bob)`` is edited in the checkpoint (``update_state``: same tool call id,
now to mallory) before or after a yes, the yes given in the ledger or as LangGraph's resume
value ``{"type": "approve"}``. "After" a yes given through LangGraph means after it was used:
bob was emailed, and the paused checkpoint is then forked (time travel) with the edit. The edited
thread is resumed with approve once, again, and by two workers at once: mallory is never emailed,
each resume pauses again showing what changed, and exactly one ticket waits for her. A later no,
as a reject resume value or in the ledger, wins over a yes not yet spent. The first test shows
LangChain's own HumanInTheLoopMiddleware emailing mallory in the same scenario.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from tests.langgraph.helpers import Backend, Child, Outbox, child
from tests.langgraph.test_middleware import config, emailer, model

APPROVE = json.dumps({"type": "approve", "by": "ann"})
MALLORY = "mallory@example.com"
ROUNDS = (1, 1, 2)  # resumed once, again, then by two workers at once


def test_langchains_own_approval_runs_an_edited_checkpoint(outbox: Outbox) -> None:
    """What the ledger guards against: HumanInTheLoopMiddleware alone emails mallory."""
    hitl = HumanInTheLoopMiddleware(interrupt_on={"send_email": True})
    agent = create_agent(
        model("bob@x"), [emailer(outbox)], middleware=[hitl], checkpointer=InMemorySaver()
    )
    agent.invoke({"messages": [HumanMessage("mail bob")]}, config())
    last = agent.get_state(config()).values["messages"][-1]
    calls = [{**c, "args": {**c["args"], "to": MALLORY}} for c in last.tool_calls]
    agent.update_state(config(), {"messages": [last.model_copy(update={"tool_calls": calls})]})
    agent.invoke(Command(resume={"decisions": [{"type": "approve"}]}), config())
    assert [line["to"] for line in outbox.lines()] == [MALLORY]


class Thread:
    """One agent thread of ``agent_child.py`` (OnceOnly, send_email needs a yes) and its workers."""

    def __init__(self, backend: Backend, folder: Path) -> None:
        self.outbox = Outbox(folder / "outbox.jsonl")
        self.env = backend.env(
            LG_MODE="once", LG_APPROVAL="1", LG_THREAD="t-1", LG_OUTBOX=str(self.outbox.path)
        )
        self.ledger = backend.ledger()
        started = self.run("start")
        assert started.report["interrupts"], started.stderr
        [self.shown] = self.ledger.approvals("t-1")
        self.paused_at = self.run("where").stdout.strip()

    def run(self, step: str, **extra: str) -> Child:
        done = child("agent_child.py", step, env={**self.env, **extra})
        assert done.returncode == 0, done.stderr
        return done

    def resume(self, decision: str, workers: int = 1) -> list[Child]:
        with ThreadPoolExecutor(workers) as pool:
            return list(
                pool.map(lambda _: self.run("answer", LG_DECISION=decision), range(workers))
            )

    def sent(self) -> list[str]:
        return [line["to"] for line in self.outbox.lines()]


@pytest.mark.parametrize("when", ["before", "after"], ids=["edited-before-yes", "edited-after-yes"])
@pytest.mark.parametrize("yes", ["ledger", "langgraph"], ids=["yes-in-ledger", "yes-resume-value"])
def test_an_edited_checkpoint_never_runs_its_edited_arguments(
    backend: Backend, tmp_path: Path, yes: str, when: str
) -> None:
    thread = Thread(backend, tmp_path)
    if yes == "ledger" and when == "after":
        thread.ledger.approve(thread.shown.ticket, by="ann")
    if yes == "langgraph" and when == "after":
        thread.resume(APPROVE)  # bob is emailed; the paused checkpoint is forked below
    thread.run("edit", LG_EDIT_TO=MALLORY, LG_EDIT_AT=thread.paused_at)
    if yes == "ledger" and when == "before":
        thread.ledger.approve(thread.shown.ticket, by="ann")
    for workers in ROUNDS:
        for resumed in thread.resume(APPROVE, workers):
            [asked] = resumed.report["interrupts"]
            assert (asked["args"]["to"], asked["changed_from"]["to"]) == (
                MALLORY,
                "bob@example.com",
            )
    honest = ["bob@example.com"] if (yes, when) == ("langgraph", "after") else []
    assert thread.sent() == honest  # mallory never
    [asked] = [t for t in thread.ledger.approvals("t-1") if t.args["to"] == MALLORY]
    assert asked.state == "pending"
    # A person who sees mallory in the ledger and says yes lets that call run, once.
    thread.ledger.approve(asked.ticket, by="lead")
    thread.resume(APPROVE, 2)
    assert thread.sent() == [*honest, MALLORY]


def test_an_approved_pause_resumed_by_workers_runs_once(backend: Backend, tmp_path: Path) -> None:
    thread = Thread(backend, tmp_path)
    for workers in ROUNDS:
        thread.resume(APPROVE, workers)
    assert thread.sent() == ["bob@example.com"]
    [ticket] = thread.ledger.approvals("t-1")
    assert (ticket.state, ticket.decided_by) == ("spent", "ann")


@pytest.mark.parametrize("no", ["reject", "ledger"])
def test_a_later_no_wins_over_a_yes_not_yet_spent(
    backend: Backend, tmp_path: Path, no: str
) -> None:
    thread = Thread(backend, tmp_path)
    thread.ledger.approve(thread.shown.ticket, by="ann")  # a yes in the ledger, not yet used
    if no == "reject":
        reject = json.dumps({"type": "reject", "message": "wrong customer", "by": "lead"})
        [told] = thread.resume(reject)
        assert told.report["tool_messages"][-1]["status"] == "error"
    else:
        thread.ledger.deny(thread.shown.ticket, by="lead", reason="wrong customer")
    thread.run("edit", LG_EDIT_TO="bob@example.com", LG_EDIT_AT=thread.paused_at)  # a copy
    thread.resume(APPROVE, 2)
    assert thread.sent() == []
    [ticket] = thread.ledger.approvals("t-1")
    assert (ticket.state, ticket.decided_by) == ("denied", "lead")
