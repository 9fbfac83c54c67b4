"""Handoffs and agent identity with OnceOnly, each beside the same scenario bare.

- An agent reached through a ``handoff(agent, ...)`` object gets the same once-only treatment as
  one listed in ``handoffs`` directly, and the ``Handoff`` keeps its own settings (tool name,
  description, input filter, ``on_handoff``, ``is_enabled``); a hand-built ``Handoff`` that shows
  no agent has the agent it returns wrapped when it is invoked.
- ``wrap`` decorates the user's own agents, so the SDK's identity and equality checks hold as
  bare: two agents equal bare stay equal, ``result.last_agent`` is the agent handed off to.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, Handoff, RunContextWrapper, Runner, RunState, function_tool, handoff
from agents.handoffs import HandoffInputData

import call4agents as c4a
from call4agents_openai_agents import OnceOnly
from tests.openai_agents.support import Outbox, assistant_message, call, outputs, script

MODES = pytest.mark.parametrize("once_only", [False, True], ids=["bare", "once-only"])
RUN = {"call4agents_run_id": "ticket-9"}


@pytest.fixture
def outbox(tmp_path: Path) -> Outbox:
    return Outbox(tmp_path / "outbox.jsonl")


def billing_agent(outbox: Outbox, *, needs_approval: bool = False) -> Agent[Any]:
    @function_tool(needs_approval=needs_approval)
    def refund(order: str) -> str:
        """Refund an order."""
        return f"refund {outbox.send(order)} for {order}"

    return Agent(
        name="billing",
        model=script(
            [call("refund", "r1", order="A-1")],
            [assistant_message("refunded")],
            [assistant_message("refunded")],  # a second resume of one saved state asks again
        ),
        tools=[refund],
    )


class Seen:
    """What the handoff's own settings were asked, run by run."""

    def __init__(self) -> None:
        self.on_handoff = 0
        self.is_enabled = 0
        self.filtered = 0

    def arrived(self, ctx: RunContextWrapper[Any]) -> None:
        self.on_handoff += 1

    def enabled(self, ctx: RunContextWrapper[Any], agent: Agent[Any]) -> bool:
        self.is_enabled += 1
        return True

    def input_filter(self, data: HandoffInputData) -> HandoffInputData:
        self.filtered += 1
        return data


def triage_to(target: Any) -> Agent[Any]:
    return Agent(
        name="triage", model=script([call("to_billing", "h1", reason="refund")]), handoffs=[target]
    )


@MODES
async def test_a_tool_behind_a_handoff_object_runs_once_per_run(
    once_only: bool, ledger: c4a.Ledger, outbox: Outbox
) -> None:
    seen = Seen()
    for delivery in (1, 2):  # the same job delivered twice: one run id, a new model each time
        billing = billing_agent(outbox)
        tool = billing.tools[0]
        to_billing = handoff(
            billing,
            tool_name_override="to_billing",
            tool_description_override="Billing questions.",
            on_handoff=seen.arrived,
            input_filter=seen.input_filter,
            is_enabled=seen.enabled,
        )
        settings = (to_billing.tool_name, to_billing.tool_description, to_billing.input_filter)
        is_enabled = to_billing.is_enabled
        triage = triage_to(to_billing)
        if once_only:
            assert OnceOnly().wrap(triage) is triage
        result = await Runner.run(triage, "refund A-1", context=dict(RUN))
        assert result.last_agent is billing
        assert billing.tools[0] is tool
        assert triage.handoffs == [to_billing]
        assert (to_billing.tool_name, to_billing.tool_description) == settings[:2]
        assert to_billing.input_filter is settings[2]
        assert to_billing.is_enabled is is_enabled
        sent = 1 if once_only else delivery  # a repeat gets the first delivery's result
        assert outputs(result) == [f"refund {sent} for A-1"]
    # The handoff's own settings ran each time, as bare.
    assert (seen.on_handoff, seen.filtered) == (2, 2)
    assert seen.is_enabled >= 2
    assert outbox.count() == (1 if once_only else 2)
    assert [e.tool for e in ledger.effects("ticket-9")] == (["refund"] if once_only else [])


@MODES
async def test_an_approved_state_resumed_twice_behind_a_handoff_object(
    once_only: bool, ledger: c4a.Ledger, outbox: Outbox
) -> None:
    billing = billing_agent(outbox, needs_approval=True)
    triage = triage_to(handoff(billing, tool_name_override="to_billing"))
    if once_only:
        OnceOnly().wrap(triage)
    first = await Runner.run(triage, "refund A-1", context=dict(RUN))
    [item] = first.interruptions
    state = first.to_state()
    state.approve(item)
    saved = state.to_string()
    for _worker in (1, 2):  # two workers resume the same saved, approved state
        resumed = await RunState.from_string(triage, saved)
        result = await Runner.run(triage, resumed)
        assert result.last_agent is billing  # found through the handoff object, as bare
        assert result.final_output == "refunded"
    assert outbox.count() == (1 if once_only else 2)


@MODES
async def test_a_hand_built_handoff_wraps_the_agent_it_returns(
    once_only: bool, ledger: c4a.Ledger, outbox: Outbox
) -> None:
    for _delivery in (1, 2):
        billing = billing_agent(outbox)

        async def to_billing_agent(
            ctx: RunContextWrapper[Any], args: str, billing: Agent[Any] = billing
        ) -> Agent[Any]:
            return billing  # chosen at run time: the Handoff shows no agent before

        hand_built: Handoff[Any, Any] = Handoff(
            tool_name="to_billing",
            tool_description="Billing questions.",
            input_json_schema={},
            on_invoke_handoff=to_billing_agent,
            agent_name="billing",
        )
        triage = triage_to(hand_built)
        if once_only:
            OnceOnly().wrap(triage)
        result = await Runner.run(triage, "refund A-1", context=dict(RUN))
        assert result.last_agent is billing
    assert outbox.count() == (1 if once_only else 2)


def test_a_hand_built_handoff_does_not_hide_a_misspelt_tool_warning(outbox: Outbox) -> None:
    # Its tools show only when it is invoked, so wrap cannot say a tools= name matches nothing.
    async def later(ctx: RunContextWrapper[Any], args: str) -> Agent[Any]:
        return billing_agent(outbox)

    hidden: Handoff[Any, Any] = Handoff("to_billing", "", {}, later, "billing")
    OnceOnly(tools={"refund": {"kind": "read"}}).wrap(triage_to(hidden))  # no warning
    with pytest.warns(RuntimeWarning, match="refnud"):
        OnceOnly(tools={"refnud": {"kind": "read"}}).wrap(triage_to(billing_agent(outbox)))


# -- identity and equality ------------------------------------------------------------------------


@MODES
async def test_two_equal_agents_stay_equal(once_only: bool, ledger: c4a.Ledger) -> None:
    # The SDK's own test_handoffs: two agents of one name and fields, the handoff goes to the
    # second, and the run's last agent equals the first.
    model = script([call("transfer_to_test", "h1")], [assistant_message("done")])
    first = Agent(name="test", model=model)
    second = Agent(name="test", model=model)
    start = Agent(name="test", model=model, handoffs=[first, second])
    if once_only:
        OnceOnly().wrap(start)
    assert first == second
    result = await Runner.run(start, "go", context=dict(RUN))
    assert result.final_output == "done"
    assert result.last_agent == first
    assert result.last_agent is second


def test_agents_wrapped_by_other_once_onlys_differ() -> None:
    # Their runs are counted against other budgets, so they are not the same agent.
    first, second = Agent(name="test"), Agent(name="test")
    OnceOnly().wrap(first)
    OnceOnly().wrap(second)
    assert first != second
    assert Agent(name="test") != first  # nor is a bare agent the wrapped one


async def test_one_agent_run_bare_then_wrapped(ledger: c4a.Ledger, outbox: Outbox) -> None:
    # wrap decorates the agent itself: runs before it are bare, runs after it are once-only.
    billing = billing_agent(outbox)
    billing.model = script(
        [call("refund", "r1", order="A-1")],
        [assistant_message("refunded")],
        [call("refund", "r2", order="A-1")],
        [assistant_message("refunded")],
        [call("refund", "r3", order="A-1")],
        [assistant_message("refunded")],
    )
    bare = await Runner.run(billing, "refund A-1", context=dict(RUN))
    assert bare.last_agent is billing
    assert ledger.effects("ticket-9") == []
    assert OnceOnly().wrap(billing) is billing
    for _ in (1, 2):
        result = await Runner.run(billing, "refund A-1", context=dict(RUN))
        assert result.last_agent is billing
        assert outputs(result) == ["refund 2 for A-1"]
    assert outbox.count() == 2  # the bare run's, then the wrapped runs' one


@MODES
def test_a_deep_copy_of_an_agent_equals_it(once_only: bool) -> None:
    # The SDK's items hold agents, and a handoff input filter may deep-copy them.
    agent = Agent(name="billing", instructions="Refunds.", handoff_description="money")
    if once_only:
        OnceOnly().wrap(agent)
    copied = copy.deepcopy(agent)
    assert copied == agent
    assert copied is not agent


@MODES
async def test_same_named_agents_told_apart_by_instructions_persist(
    once_only: bool, ledger: c4a.Ledger, outbox: Outbox
) -> None:
    # A saved RunState tells same-named agents apart by their fields; wrapped, still so.
    def same_named(instructions: str) -> Agent[Any]:
        agent = billing_agent(outbox, needs_approval=True)
        agent.instructions = instructions
        return agent

    first, second = same_named("first"), same_named("second")
    root = Agent(
        name="root",
        model=script([call("to_first", "h1")]),
        handoffs=[
            handoff(first, tool_name_override="to_first"),
            handoff(second, tool_name_override="to_second"),
        ],
    )
    if once_only:
        OnceOnly().wrap(root)
    result = await Runner.run(root, "refund A-1", context=dict(RUN))
    [item] = result.interruptions
    state = result.to_state()
    state.approve(item)
    restored = await RunState.from_string(root, state.to_string())
    resumed = await Runner.run(root, restored)
    assert resumed.last_agent is first
    assert outbox.count() == 1
