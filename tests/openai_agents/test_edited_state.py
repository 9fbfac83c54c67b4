"""A yes given through the SDK covers only the arguments the ledger showed for that call.

The SDK keys an approval by call id, and its fingerprint of a call is an unkeyed hash anyone can
recompute. So a saved ``RunState`` can be edited after the yes (``amount`` 10 -> 9999, with a
matching fingerprint) and still be accepted by the SDK. The ledger remembers the arguments first
shown for each call id: the edited call runs nowhere, however often and by however many workers
it is resumed, until a person decides the new arguments in the ledger; a later no wins.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, Runner, RunState

import call4agents as c4a
from call4agents.facade.cli import main as cli
from call4agents_openai_agents import OnceOnly
from tests import forked
from tests.conftest import Target
from tests.openai_agents.approval_child import bank_agent
from tests.openai_agents.support import Outbox, assistant_message, call, outputs

CHILD = Path(__file__).with_name("approval_child.py")
RUN = {"call4agents_run_id": "refund-77"}
CALL_ID = "call_R"
# The yes through the SDK or in the ledger; the state edited after it, or before it.
HOW = ["state", "ledger", "edited-first", "edited-first-ledger"]


async def _saved_state(agent: Agent[Any], amount: int) -> tuple[Any, str]:
    """A run paused at ``wire(bob, amount)``, its interruption and the saved state."""
    result = await Runner.run(agent, "pay bob", context=dict(RUN))
    [item] = result.interruptions
    return item, result.to_state().to_string()


def _fingerprint(text: str) -> str:
    return str(json.loads(text)["context"]["tool_invocations"][CALL_ID]["fingerprint"])


async def _edit(state_text: str, outbox: Outbox, amount: int) -> str:
    """The saved state with the call's amount changed, fingerprint recomputed as the SDK would."""
    other = bank_agent(
        outbox.path, [call("wire", CALL_ID, to="bob", amount=amount)], needs_approval=True
    )
    _, other_text = await _saved_state(other, amount)
    edited = re.sub(r'(\\"amount\\":)\d+', rf"\g<1>{amount}", state_text)
    return edited.replace(_fingerprint(state_text), _fingerprint(other_text))


def _agent(outbox: Outbox, once: bool, *steps: Any) -> Agent[Any]:
    agent = bank_agent(outbox.path, *steps, needs_approval=True)
    return OnceOnly().wrap(agent) if once else agent


async def _approved_then_edited(
    outbox: Outbox, once: bool, how: str, ledger: c4a.Ledger | None
) -> tuple[Agent[Any], str]:
    done = [[assistant_message("done")] for _ in range(8)]  # one reply per resume
    agent = _agent(outbox, once, [call("wire", CALL_ID, to="bob", amount=10)], *done)
    result = await Runner.run(agent, "pay bob", context=dict(RUN))
    state = result.to_state()
    [item] = result.interruptions
    if how == "ledger" and ledger is not None:
        [ticket] = ledger.approvals("refund-77", state="pending")
        ledger.approve(ticket.ticket, by="ann")
    if how.startswith("edited-first"):  # edited while it waited, then a yes
        edited = await RunState.from_string(agent, await _edit(state.to_string(), outbox, 9999))
        if how == "edited-first-ledger" and ledger is not None:  # to the ticket that showed 10
            [ticket] = ledger.approvals("refund-77", state="pending")
            ledger.approve(ticket.ticket, by="ann")
        edited.approve(edited.get_interruptions()[0])
        return agent, edited.to_string()
    state.approve(item)  # the SDK's own channel (with OnceOnly: carried to the shown ticket)
    return agent, await _edit(state.to_string(), outbox, 9999)


async def _resume(agent: Agent[Any], text: str) -> list[str]:
    resumed = await Runner.run(agent, await RunState.from_string(agent, text))
    return outputs(resumed)


def test_the_bare_sdk_runs_an_edited_approved_state(tmp_path: Path) -> None:
    """What the ledger guards against: the SDK alone runs the edited arguments."""
    import asyncio

    outbox = Outbox(tmp_path / "outbox.jsonl")

    async def scenario() -> None:
        agent, edited = await _approved_then_edited(outbox, False, "state", None)
        await _resume(agent, edited)

    asyncio.run(scenario())
    assert [line["amount"] for line in outbox.lines()] == [9999]


@pytest.mark.parametrize("how", HOW)
async def test_an_edited_approved_state_runs_nothing_however_often_resumed(
    ledger: c4a.Ledger, tmp_path: Path, how: str
) -> None:
    outbox = Outbox(tmp_path / "outbox.jsonl")
    agent, edited = await _approved_then_edited(outbox, True, how, ledger)
    told = [await _resume(agent, edited) for _ in range(3)]
    assert outbox.count() == 0
    for outputs_ in told:
        assert any("changed since they were shown" in o for o in outputs_), outputs_
        assert any('"amount": 10' in o and "9999" in o for o in outputs_), outputs_
    pending = ledger.approvals("refund-77", state="pending")
    [asked] = [t for t in pending if t.args["amount"] == 9999]  # one ticket, however often
    # A person who sees 9999 in the ledger and says yes lets it run, once.
    ledger.approve(asked.ticket, by="ann")
    await _resume(agent, edited)
    await _resume(agent, edited)
    assert [line["amount"] for line in outbox.lines()] == [9999]


@pytest.mark.parametrize("how", HOW)
async def test_two_workers_resuming_an_edited_state_run_nothing(
    target: Target, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    env = target.env()
    monkeypatch.setenv("CALL4AGENTS_SECRET", env["CALL4AGENTS_SECRET"])
    ledger = c4a.init(target.open())
    outbox = Outbox(tmp_path / "outbox.jsonl")
    _, edited = await _approved_then_edited(outbox, True, how, ledger)
    state_file = tmp_path / "edited-state.json"
    state_file.write_text(edited)
    args = ["once", str(state_file), str(outbox.path)]
    for _ in range(2):  # twice over: each round, two workers at once
        workers = forked.run_together(CHILD, [(args, env)] * 2)
        assert [w.returncode for w in workers] == [0, 0], [w.stderr for w in workers]
        for worker in workers:  # each was told why, and ran nothing
            told = json.loads(worker.stdout)["outputs"]
            assert any("changed since they were shown" in o for o in told), told
    assert outbox.count() == 0


@pytest.mark.parametrize("no", ["once.reject", "ledger", "cli"])
async def test_a_later_no_on_another_copy_wins_over_the_yes(
    ledger: c4a.Ledger, target: Target, tmp_path: Path, no: str
) -> None:
    outbox = Outbox(tmp_path / "outbox.jsonl")
    once = OnceOnly()
    agent = once.wrap(
        bank_agent(
            outbox.path,
            [call("wire", CALL_ID, to="bob", amount=10)],
            [assistant_message("done")],
            needs_approval=True,
        )
    )
    result = await Runner.run(agent, "pay bob", context=dict(RUN))
    [item] = result.interruptions
    saved = result.to_state().to_string()
    first = await RunState.from_string(agent, saved)
    once.approve(first, item, by="ann")  # recorded in the ledger
    if no == "once.reject":
        second = await RunState.from_string(agent, saved)  # another copy of the same state
        once.reject(second, second.get_interruptions()[0], by="lead", reason="wrong payee")
    else:
        [ticket] = ledger.approvals("refund-77")
        if no == "ledger":
            ledger.deny(ticket.ticket, by="lead", reason="wrong payee")
        else:
            where = ["--url", target.url, *(["--schema", target.schema] if target.schema else [])]
            assert cli(["deny", ticket.ticket, "--by", "lead", *where]) == 0
    await Runner.run(agent, first)  # the approved copy resumes after the no
    assert outbox.count() == 0
    [ticket] = ledger.approvals("refund-77")
    assert ticket.state == "denied"
    assert ticket.decided_by == "lead"
