"""Approvals as SDK interruptions whose answers are recorded in the ledger, bound to the call."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

import pytest
from agents import Agent, Runner, RunResult, RunState, function_tool
from agents.exceptions import ModelBehaviorError, UserError

import call4agents as c4a
from call4agents_openai_agents import OnceOnly
from tests import forked
from tests.conftest import Target
from tests.openai_agents.approval_child import bank_agent
from tests.openai_agents.support import Outbox, assistant_message, call, outputs

CHILD = Path(__file__).with_name("approval_child.py")
RUN = {"call4agents_run_id": "ticket-7"}
GATED = {"wire": {"approval": True}}


def pay(outbox: Outbox, amount: int = 500, call_id: str = "call_W") -> Agent[Any]:
    """The bank agent, asked to wire ``amount`` to bob (it pauses for approval first)."""
    return bank_agent(
        outbox.path, [call("wire", call_id, to="bob", amount=amount)], [assistant_message("done")]
    )


async def paused(once: OnceOnly, agent: Agent[Any]) -> tuple[Agent[Any], RunResult]:
    wrapped = once.wrap(agent)
    return wrapped, await Runner.run(wrapped, "pay bob", context=dict(RUN))


@pytest.fixture
def outbox(tmp_path: Path) -> Outbox:
    return Outbox(tmp_path / "outbox.jsonl")


async def test_a_call_needing_a_yes_pauses_with_a_ledger_ticket(
    ledger: c4a.Ledger, outbox: Outbox
) -> None:
    _, result = await paused(OnceOnly(tools=GATED), pay(outbox))
    [item] = result.interruptions
    assert (item.tool_name, json.loads(item.arguments)) == ("wire", {"to": "bob", "amount": 500})
    [ticket] = ledger.approvals("ticket-7", state="pending")
    assert (ticket.tool, ticket.args) == ("wire", {"to": "bob", "amount": 500})
    assert outbox.count() == 0


async def test_two_calls_of_one_action_get_their_own_answers(
    ledger: c4a.Ledger, outbox: Outbox
) -> None:
    # Under a key= naming one payment per payee, the model asks to wire 5 and 5000 in one turn.
    # The person approves the 5 and rejects the 5000 with the SDK's own API: the yes lands on
    # the ticket that showed 5, and the 5000 is never wired, not even when the model retries.
    once = OnceOnly(tools={"wire": {"approval": True, "key": lambda to, amount: f"pay-{to}"}})
    agent = once.wrap(
        bank_agent(
            outbox.path,
            [call("wire", "c5", to="bob", amount=5), call("wire", "c5000", to="bob", amount=5000)],
            [call("wire", "again", to="bob", amount=5000)],
            [assistant_message("done")],
        )
    )
    result = await Runner.run(agent, "pay bob", context=dict(RUN))
    items = {json.loads(i.arguments)["amount"]: i for i in result.interruptions}
    state = result.to_state()
    state.approve(items[5])
    state.reject(items[5000])
    await Runner.run(agent, state)
    assert [line["amount"] for line in outbox.lines()] == [5]
    tickets = {t.args["amount"]: t for t in ledger.approvals("ticket-7")}
    assert tickets[5].state == "spent"
    assert tickets[5000].state == "pending"  # never approved, so it stays unanswered


async def test_once_approve_records_who_and_the_call_runs_once(
    ledger: c4a.Ledger, outbox: Outbox
) -> None:
    once = OnceOnly(tools=GATED)
    agent, result = await paused(once, pay(outbox))
    state = result.to_state()
    saved = once.approve(state, result.interruptions[0], by="ann", reason="known payee")
    assert saved is not None
    assert saved.decided_by == "ann"
    resumed = await Runner.run(agent, state)
    assert outputs(resumed) == ["wired 500 to bob"]
    [ticket] = ledger.approvals("ticket-7")
    assert (ticket.state, ticket.decided_by, ticket.reason) == ("spent", "ann", "known payee")
    assert outbox.count() == 1


async def test_a_plain_state_approve_is_recorded_in_the_ledger(
    ledger: c4a.Ledger, outbox: Outbox
) -> None:
    agent, result = await paused(OnceOnly(tools=GATED), pay(outbox))
    state = result.to_state()
    state.approve(result.interruptions[0])
    resumed = await Runner.run(agent, state)
    assert outputs(resumed) == ["wired 500 to bob"]
    [ticket] = ledger.approvals("ticket-7")
    assert ticket.state == "spent"
    assert "RunState.approve" in str(ticket.decided_by)
    assert outbox.count() == 1


async def test_a_decision_made_in_the_ledger_carries_to_the_state(
    ledger: c4a.Ledger, outbox: Outbox
) -> None:
    agent, result = await paused(OnceOnly(tools=GATED), pay(outbox))
    [ticket] = ledger.approvals("ticket-7", state="pending")
    ledger.approve(ticket.ticket, by="ann")  # e.g. `call4agents approve <ticket>` in a terminal
    state = result.to_state()
    state.approve(result.interruptions[0])
    await Runner.run(agent, state)
    [spent] = ledger.approvals("ticket-7")
    assert (spent.state, spent.decided_by) == ("spent", "ann")
    assert outbox.count() == 1


async def test_a_no_is_recorded_and_told_to_the_model(ledger: c4a.Ledger, outbox: Outbox) -> None:
    once = OnceOnly(tools=GATED)
    agent, result = await paused(once, pay(outbox))
    state = result.to_state()
    once.reject(state, result.interruptions[0], by="ann", reason="over the limit")
    resumed = await Runner.run(agent, state)
    [told] = outputs(resumed)
    assert "ann said no (over the limit)" in told
    [ticket] = ledger.approvals("ticket-7")
    assert (ticket.state, ticket.decided_by) == ("denied", "ann")
    # The model asks again for the same call in the same run: no new question, no wire.
    again = await Runner.run(once.wrap(pay(outbox, call_id="call_X")), "pay", context=dict(RUN))
    assert again.interruptions == []
    [refused] = outputs(again)
    assert "was not run" in refused
    assert "denied by ann" in refused
    assert outbox.count() == 0


async def test_state_approvals_can_be_refused_unless_recorded_in_the_ledger(
    ledger: c4a.Ledger, outbox: Outbox
) -> None:
    once = OnceOnly(tools=GATED, trust_state_approvals=False)
    agent, result = await paused(once, pay(outbox))
    blob = result.to_state().to_string()
    state = await RunState.from_string(agent, blob)
    state.approve(state.get_interruptions()[0])  # anyone holding the saved state could do this
    resumed = await Runner.run(agent, state)
    [told] = outputs(resumed)
    assert "needs a person's approval" in told
    assert outbox.count() == 0
    fresh = agent.clone(model=bank_agent(outbox.path, [assistant_message("done")]).model)
    state = await RunState.from_string(fresh, blob)
    once.approve(state, state.get_interruptions()[0], by="ann")
    await Runner.run(fresh, state)
    assert outbox.count() == 1


async def test_the_tools_own_needs_approval_is_bound_to_the_ledger(
    ledger: c4a.Ledger, outbox: Outbox
) -> None:
    @function_tool(needs_approval=True)
    def close_account(customer: str) -> str:
        """Close a customer's account."""
        outbox.send(customer)
        return f"closed {customer}"

    agent = Agent(
        name="bank",
        model=bank_agent(
            outbox.path, [call("close_account", "c1", customer="bob")], [assistant_message("ok")]
        ).model,
        tools=[close_account],
    )
    once = OnceOnly()
    wrapped, result = await paused(once, agent)
    [ticket] = ledger.approvals("ticket-7", state="pending")
    assert ticket.args == {"customer": "bob"}
    state = result.to_state()
    once.approve(state, result.interruptions[0], by="ann")
    await Runner.run(wrapped, state)
    assert outbox.count() == 1


@pytest.mark.parametrize("once_only", [False, True], ids=["bare", "once-only"])
async def test_a_needs_approval_neither_bool_nor_callable_is_refused_as_bare(
    ledger: c4a.Ledger, outbox: Outbox, once_only: bool
) -> None:
    @function_tool(needs_approval=cast(Any, "always"))
    def close_account(customer: str) -> str:
        """Close a customer's account."""
        outbox.send(customer)
        return f"closed {customer}"

    agent = Agent(
        name="bank",
        model=bank_agent(
            outbox.path, [call("close_account", "c1", customer="bob")], [assistant_message("ok")]
        ).model,
        tools=[close_account],
    )
    if once_only:
        agent = OnceOnly().wrap(agent)
    with pytest.raises(UserError, match="needs_approval"):
        await Runner.run(agent, "close bob's account", context=dict(RUN))
    assert outbox.count() == 0


async def test_a_policy_asks_only_for_the_calls_it_names(
    ledger: c4a.Ledger, outbox: Outbox
) -> None:
    once = OnceOnly(tools={"wire": {"approval": lambda to, amount: amount > 100}})
    _, small = await paused(once, pay(outbox, amount=50))
    assert small.interruptions == []
    _, large = await paused(once, pay(outbox, amount=5000, call_id="call_L"))
    assert [json.loads(i.arguments)["amount"] for i in large.interruptions] == [5000]
    assert [line["amount"] for line in outbox.lines()] == [50]


async def test_the_ledgers_policy_by_side_effect_class(target: Target, outbox: Outbox) -> None:
    ledger = target.open(approval_for=("irreversible",))
    once = OnceOnly(ledger=ledger, tools={"wire": {"kind": "irreversible"}})
    _, result = await paused(once, pay(outbox))
    assert [i.tool_name for i in result.interruptions] == ["wire"]
    assert len(ledger.approvals("ticket-7", state="pending")) == 1


async def test_an_edited_saved_state_runs_nothing(ledger: c4a.Ledger, outbox: Outbox) -> None:
    agent, result = await paused(OnceOnly(tools=GATED), pay(outbox))
    state = result.to_state()
    state.approve(result.interruptions[0])
    edited = state.to_string().replace(
        '{\\"to\\":\\"bob\\",\\"amount\\":500}', '{\\"to\\":\\"mallory\\",\\"amount\\":9999}'
    )
    assert "mallory" in edited
    with pytest.raises(ModelBehaviorError):  # the SDK's own fingerprint check refuses it
        await Runner.run(agent, await RunState.from_string(agent, edited))
    assert outbox.count() == 0


async def test_a_state_approved_behind_the_ledgers_back_runs_nothing(
    ledger: c4a.Ledger, outbox: Outbox
) -> None:
    # A state approved where the ledger never asked (e.g. forged, or made by an agent without
    # OnceOnly) names a call with no ticket: the SDK's yes grants nothing, and a ticket opens.
    asked = [call("wire", "call_W", to="bob", amount=9999)]
    plain_agent = bank_agent(outbox.path, asked, needs_approval=True)
    plain = await Runner.run(plain_agent, "pay", context=dict(RUN))
    state = plain.to_state()
    state.approve(plain.interruptions[0])
    agent = OnceOnly(tools=GATED).wrap(bank_agent(outbox.path, [assistant_message("done")]))
    resumed = await Runner.run(agent, await RunState.from_string(agent, state.to_string()))
    [told] = outputs(resumed)
    assert "needs a person's approval" in told
    assert outbox.count() == 0
    [ticket] = ledger.approvals("ticket-7", state="pending")
    assert ticket.args == {"to": "bob", "amount": 9999}


@pytest.mark.parametrize(("mode", "expected"), [("plain", 2), ("once", 1)])
async def test_two_workers_resume_one_saved_approved_state(
    target: Target, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str, expected: int
) -> None:
    if mode == "plain" and target.backend != "sqlite":
        pytest.skip("without Call4Agents there is no ledger to vary")
    env = target.env()
    monkeypatch.setenv("CALL4AGENTS_SECRET", env["CALL4AGENTS_SECRET"])
    c4a.init(target.open())
    outbox = Outbox(tmp_path / "outbox.jsonl")
    asked = [call("wire", "call_W", to="bob", amount=500)]
    agent = bank_agent(outbox.path, asked, needs_approval=True)
    agent = OnceOnly().wrap(agent) if mode == "once" else agent
    result = await Runner.run(agent, "pay bob", context=dict(RUN))
    state = result.to_state()
    state.approve(result.interruptions[0])
    state_file = tmp_path / "approved-state.json"
    state_file.write_text(state.to_string())

    workers = forked.run_together(CHILD, [([mode, str(state_file), str(outbox.path)], env)] * 2)
    assert [w.returncode for w in workers] == [0, 0], [w.stderr for w in workers]
    assert outbox.count() == expected
    seen = [json.loads(w.stdout)["outputs"] for w in workers]
    assert seen == [["wired 500 to bob"], ["wired 500 to bob"]]
    if mode == "once":  # one yes, spent by the one execution
        assert [t.state for t in target.open().approvals("ticket-7")] == ["spent"]


async def test_an_approval_inside_an_agent_used_as_a_tool(
    ledger: c4a.Ledger, outbox: Outbox
) -> None:
    once = OnceOnly()
    payer = once.wrap(
        bank_agent(
            outbox.path,
            [call("wire", "w1", to="bob", amount=5)],
            [assistant_message("paid")],
            needs_approval=True,
        )
    )
    lead = Agent(
        name="lead",
        model=bank_agent(
            outbox.path, [call("payer", "p1", input="pay bob")], [assistant_message("all done")]
        ).model,
        tools=[payer.as_tool("payer", "Pays people")],
    )
    wrapped, result = await paused(once, lead)
    [item] = result.interruptions
    assert item.tool_name == "wire"
    [ticket] = ledger.approvals("ticket-7", state="pending")
    assert ticket.args == {"to": "bob", "amount": 5}
    state = result.to_state()
    once.approve(state, item, by="ann")
    done = await Runner.run(wrapped, state)
    assert done.final_output == "all done"
    assert [(t.state, t.decided_by) for t in ledger.approvals("ticket-7")] == [("spent", "ann")]
    assert outbox.count() == 1


async def test_a_state_yes_resumed_under_another_run_id_names_both(
    ledger: c4a.Ledger, outbox: Outbox
) -> None:
    first = OnceOnly(tools=GATED, run_id="run-A").wrap(pay(outbox))
    result = await Runner.run(first, "pay bob")
    state = result.to_state()
    state.approve(result.interruptions[0])  # the SDK's own yes, carried by the saved state
    # Another process resumes the saved state, but its OnceOnly finds another run id.
    agent = OnceOnly(tools=GATED, run_id="run-B").wrap(bank_agent(outbox.path, []))
    resumed = await RunState.from_string(agent, state.to_string())
    with pytest.raises(UserError, match="run 'run-A'") as raised:  # the SDK's tool error
        await Runner.run(agent, resumed)
    assert "resumed it as run 'run-B'" in str(raised.value)
    assert isinstance(raised.value.__cause__, c4a.ConfigurationError)
    assert outbox.count() == 0
    [asked] = ledger.approvals("run-A")
    assert asked.state == "pending"  # nothing was decided or spent under either run
    assert ledger.effects("run-B") == []


@pytest.mark.parametrize("answer", ["yes", "no"])
async def test_the_ledgers_answer_stands_when_the_model_asks_again(
    ledger: c4a.Ledger, outbox: Outbox, answer: str
) -> None:
    # The tool asks the SDK's way. The run pauses; a person answers in the ledger only (a
    # terminal, the console); the job is delivered again and the model asks for the same wire
    # under a new call id. No second question: the yes is spent, or the no refuses the call.
    once = OnceOnly()
    asked = bank_agent(outbox.path, [call("wire", "c1", to="bob", amount=5)], needs_approval=True)
    _, first = await paused(once, asked)
    assert len(first.interruptions) == 1
    [ticket] = ledger.approvals("ticket-7", state="pending")
    if answer == "yes":
        ledger.approve(ticket.ticket, by="ann")
    else:
        ledger.deny(ticket.ticket, by="ann", reason="wrong payee")
    again = bank_agent(
        outbox.path,
        [call("wire", "c2", to="bob", amount=5)],
        [assistant_message("done")],
        needs_approval=True,
    )
    result = await Runner.run(once.wrap(again), "pay bob", context=dict(RUN))
    assert result.interruptions == []
    [told] = outputs(result)
    [decided] = ledger.approvals("ticket-7")
    if answer == "yes":
        assert (told, decided.state, outbox.count()) == ("wired 5 to bob", "spent", 1)
    else:
        assert "denied by ann" in told
        assert (decided.state, outbox.count()) == ("denied", 0)
