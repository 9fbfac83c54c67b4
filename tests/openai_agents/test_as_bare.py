"""What the Agents SDK does bare about approvals, it does with OnceOnly: each test runs the same
scenario bare and switched on, on the SDK's own Runner and its scripted test model.

- The tool's own ``needs_approval`` is judged the SDK's way: its arguments are prepared first, so
  a call whose validation would change them (a default the model left out) needs a yes without
  the policy being asked, and validation code runs only after the yes; a resumed, approved call
  is not judged again.
- A yes the SDK recorded in the run context (``approve_tool``, sticky or not, carried through a
  converted context) runs the call as bare, written to the ledger for exactly that call; a yes
  another agent's tool of the same name got is no yes here. Where the ledger's own policy gates
  the tool, or ``trust_state_approvals=False``, only a yes in the ledger counts.
- A streamed resume reports the same tool guardrail results as a non-streamed one, as bare.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from agents import (
    Agent,
    RunConfig,
    RunContextWrapper,
    Runner,
    RunResult,
    RunResultStreaming,
    RunState,
    ToolGuardrailFunctionOutput,
    ToolInputGuardrailData,
    ToolOutputGuardrailData,
    function_tool,
    tool_input_guardrail,
    tool_output_guardrail,
)
from agents.items import ToolApprovalItem
from pydantic import BaseModel, TypeAdapter, field_validator

import call4agents as c4a
from call4agents_openai_agents import OnceOnly
from tests.openai_agents.support import Outbox, assistant_message, call, outputs, script

MODES = pytest.mark.parametrize("once_only", [False, True], ids=["bare", "once-only"])
RUN_ID = "order-12"
STATE_YES = "RunState.approve (OpenAI Agents SDK)"


@pytest.fixture
def outbox(tmp_path: Path) -> Outbox:
    return Outbox(tmp_path / "outbox.jsonl")


async def run(agent: Agent[Any], given: Any, context: Any = None) -> RunResult:
    start = given if isinstance(given, RunState) else str(given)
    return await Runner.run(agent, start, context=context, run_config=RunConfig())


# -- the tool's own policy, judged the SDK's way --------------------------------------------------

VALIDATED: list[str] = []  # the IBANs Payee's validator saw, in order


class Payee(BaseModel):
    iban: str

    @field_validator("iban")
    @classmethod
    def check(cls, value: str) -> str:
        VALIDATED.append(value)  # application code, e.g. a lookup at the bank
        return value


@MODES
async def test_a_default_the_policy_never_saw_needs_a_yes(
    ledger: c4a.Ledger, outbox: Outbox, once_only: bool
) -> None:
    # The policy asks for large amounts; the model leaves the amount out and the default (5000)
    # fills it in. The SDK does not show the policy arguments that validation changes: it asks
    # for a yes instead. Asked with the model's raw arguments, the policy would let 5000 go.
    asked: list[dict[str, Any]] = []

    def large(_ctx: RunContextWrapper[Any], params: dict[str, Any], _call_id: str) -> bool:
        asked.append(params)
        return int(params.get("amount", 0)) > 100

    @function_tool(needs_approval=large, strict_mode=False)
    def wire(to: str, amount: int = 5000) -> str:
        """Wire money."""
        outbox.send(to, amount=amount)
        return f"wired {amount} to {to}"

    steps = [[call("wire", "w1", to="bob")], [assistant_message("done")]]
    agent = Agent(name="bank", model=script(*steps), tools=[wire])
    agent = OnceOnly().wrap(agent) if once_only else agent
    context = {"call4agents_run_id": RUN_ID}
    paused = await run(agent, "pay bob", context)
    assert [i.tool_name for i in paused.interruptions] == ["wire"]
    assert (asked, outbox.count()) == ([], 0)
    state = paused.to_state()
    state.approve(paused.interruptions[0])
    resumed = await run(agent, state)
    assert outputs(resumed) == ["wired 5000 to bob"]
    assert (asked, outbox.count()) == ([], 1)  # the policy is not asked after the yes either
    if once_only:
        [ticket] = ledger.approvals(RUN_ID)
        assert (ticket.args, ticket.state, ticket.decided_by) == ({"to": "bob"}, "spent", STATE_YES)


@MODES
async def test_validation_code_runs_only_after_the_yes(
    ledger: c4a.Ledger, outbox: Outbox, once_only: bool
) -> None:
    validated = VALIDATED
    validated.clear()
    asked: list[str] = []

    def never(_ctx: RunContextWrapper[Any], _params: dict[str, Any], call_id: str) -> bool:
        asked.append(call_id)
        return False

    @function_tool(needs_approval=never, strict_mode=False)
    def wire(payee: Payee) -> str:
        """Wire money."""
        outbox.send(payee.iban)
        return f"wired to {payee.iban}"

    steps = [[call("wire", "w1", payee={"iban": "DE00"})], [assistant_message("done")]]
    agent = Agent(name="bank", model=script(*steps), tools=[wire])
    agent = OnceOnly().wrap(agent) if once_only else agent
    paused = await run(agent, "pay", {"call4agents_run_id": RUN_ID})
    assert len(paused.interruptions) == 1
    assert (validated, asked) == ([], [])
    state = paused.to_state()
    state.approve(paused.interruptions[0])
    resumed = await run(agent, await RunState.from_string(agent, state.to_string()))
    assert outputs(resumed) == ["wired to DE00"]
    assert (validated, asked, outbox.count()) == (["DE00"], [], 1)


# -- a yes the SDK recorded in the run context ----------------------------------------------------


def _gated_wire(outbox: Outbox) -> Any:
    @function_tool(needs_approval=True)
    def wire(to: str, amount: int) -> str:
        """Wire money."""
        outbox.send(to, amount=amount)
        return f"wired {amount} to {to}"

    return wire


def _converted(context: RunContextWrapper[Any]) -> RunContextWrapper[Any]:
    """The run context as it comes back from a JSON round trip (a queue, a workflow engine)."""
    adapter = TypeAdapter(RunContextWrapper[dict[str, str]])
    return adapter.validate_json(adapter.dump_json(context))


@MODES
@pytest.mark.parametrize("always", [False, True], ids=["this-call", "always"])
async def test_a_yes_the_run_context_carries_runs_the_call(
    ledger: c4a.Ledger, outbox: Outbox, once_only: bool, always: bool
) -> None:
    asked = call("wire", "w1", to="bob", amount=5)
    agent = Agent(
        name="bank", model=script([asked], [assistant_message("done")]), tools=[_gated_wire(outbox)]
    )
    agent = OnceOnly().wrap(agent) if once_only else agent
    context = RunContextWrapper(context={"call4agents_run_id": RUN_ID})
    context.approve_tool(ToolApprovalItem(agent=agent, raw_item=asked), always_approve=always)
    result = await run(agent, "pay bob", _converted(context))
    assert result.interruptions == []
    assert outputs(result) == ["wired 5 to bob"]
    assert outbox.count() == 1
    if once_only:  # written to the ledger for exactly this call, and spent by it
        [ticket] = ledger.approvals(RUN_ID)
        assert (ticket.args, ticket.state, ticket.decided_by) == (
            {"to": "bob", "amount": 5},
            "spent",
            STATE_YES,
        )


@MODES
async def test_a_yes_for_another_agents_tool_of_that_name_is_no_yes_here(
    ledger: c4a.Ledger, outbox: Outbox, once_only: bool
) -> None:
    # The run context holds a yes for call w1 of another agent's wire tool. The SDK pauses this
    # agent's w1 for a yes of its own; the one given then (the SDK's own way) runs it, once.
    asked = call("wire", "w1", to="bob", amount=5)
    other = Agent(name="bank", tools=[_gated_wire(outbox)])
    agent = Agent(
        name="bank", model=script([asked], [assistant_message("done")]), tools=[_gated_wire(outbox)]
    )
    agent = OnceOnly().wrap(agent) if once_only else agent
    context = RunContextWrapper(context={"call4agents_run_id": RUN_ID})
    context.approve_tool(ToolApprovalItem(agent=other, raw_item=asked))
    paused = await run(agent, "pay bob", _converted(context))
    [item] = paused.interruptions
    assert outbox.count() == 0
    if once_only:
        assert [t.state for t in ledger.approvals(RUN_ID)] == ["pending"]
    state = paused.to_state()
    state.approve(item)
    resumed = await run(agent, state)
    assert outputs(resumed) == ["wired 5 to bob"]
    assert outbox.count() == 1
    if once_only:  # the yes went to the ticket the ledger opened for this agent's call
        [ticket] = ledger.approvals(RUN_ID)
        assert (ticket.state, ticket.decided_by) == ("spent", STATE_YES)


@pytest.mark.parametrize("why", ["trust_state_approvals=False", "the ledger's policy"])
async def test_only_a_yes_in_the_ledger_counts_where_set(
    ledger: c4a.Ledger, outbox: Outbox, why: str
) -> None:
    asked = call("wire", "w1", to="bob", amount=5)
    agent = Agent(
        name="bank", model=script([asked], [assistant_message("done")]), tools=[_gated_wire(outbox)]
    )
    if why == "trust_state_approvals=False":
        once = OnceOnly(trust_state_approvals=False)
    else:
        once = OnceOnly(tools={"wire": {"approval": True}})
    agent = once.wrap(agent)
    context = RunContextWrapper(context={"call4agents_run_id": RUN_ID})
    context.approve_tool(ToolApprovalItem(agent=agent, raw_item=asked), always_approve=True)
    result = await run(agent, "pay bob", _converted(context))
    [told] = outputs(result)
    assert "needs a person's approval" in told
    assert outbox.count() == 0
    [ticket] = ledger.approvals(RUN_ID)
    assert ticket.state == "pending"  # the ledger asks; a person's yes there lets it run once


# -- streamed resumes -----------------------------------------------------------------------------


def _guarded_agent() -> Agent[Any]:
    @tool_input_guardrail
    def checked_in(_data: ToolInputGuardrailData) -> ToolGuardrailFunctionOutput:
        return ToolGuardrailFunctionOutput.allow(output_info="input checked")

    @tool_output_guardrail
    def checked_out(_data: ToolOutputGuardrailData) -> ToolGuardrailFunctionOutput:
        return ToolGuardrailFunctionOutput.allow(output_info="output checked")

    @function_tool(
        needs_approval=True,
        tool_input_guardrails=[checked_in],
        tool_output_guardrails=[checked_out],
    )
    def refund(order: str) -> str:
        """Refund an order."""
        return f"refunded {order}"

    steps = [[call("refund", "r1", order="A-1")], [assistant_message("done")]]
    return Agent(name="billing", model=script(*steps), tools=[refund])


async def _resumed(
    agent: Agent[Any], streamed: bool, run_id: str
) -> RunResult | RunResultStreaming:
    """A run paused for the refund's approval, approved, and resumed; streamed or not."""
    context = {"call4agents_run_id": run_id}
    if not streamed:
        paused = await run(agent, "refund A-1", context)
        state = paused.to_state()
        state.approve(paused.interruptions[0])
        return await run(agent, state)
    first = Runner.run_streamed(agent, "refund A-1", context=context)
    async for _ in first.stream_events():
        pass
    state = first.to_state()
    state.approve(first.interruptions[0])
    second = Runner.run_streamed(agent, state)
    async for _ in second.stream_events():
        pass
    return second


def _guardrails(result: RunResult | RunResultStreaming) -> tuple[Any, ...]:
    return (
        result.final_output,
        outputs(result),
        [r.output.output_info for r in result.tool_input_guardrail_results],
        [r.output.output_info for r in result.tool_output_guardrail_results],
    )


async def test_a_streamed_resume_reports_the_tool_guardrails_as_bare(ledger: c4a.Ledger) -> None:
    seen = {}
    for once_only in (False, True):
        for streamed in (False, True):
            agent = _guarded_agent()
            agent = OnceOnly().wrap(agent) if once_only else agent
            run_id = f"refund-{once_only}-{streamed}"  # each run its own: none repeats another
            seen[once_only, streamed] = _guardrails(await _resumed(agent, streamed, run_id))
    bare = seen[False, False]
    assert bare[:2] == ("done", ["refunded A-1"])
    assert seen == {key: bare for key in seen}, seen
    assert [t.state for t in ledger.approvals()] == ["spent", "spent"]
