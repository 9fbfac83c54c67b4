"""Run controls through the Agents SDK: budgets, escalation, undo and find-existing.

Every agent is a real ``Agent`` run by the SDK's ``Runner`` with its offline ``ScriptedModel``;
responses carry ``Usage`` figures where cost matters. Emails land in an outbox file outside the
ledger, so what really happened is counted independently of what the ledger says.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest
from agents import (
    Agent,
    AgentHooks,
    FunctionTool,
    RunContextWrapper,
    Runner,
    Usage,
    function_tool,
)
from agents.exceptions import AgentsException
from agents.items import ModelResponse, TResponseInputItem, TResponseOutputItem
from agents.testing import ModelStep, ScriptedModel
from sqlalchemy import update

import call4agents as c4a
from call4agents.facade.cli import main as cli_main
from call4agents.storage.tables import run_counters
from call4agents_openai_agents import OnceOnly
from tests import forked
from tests.conftest import Target, run_child
from tests.openai_agents.support import Outbox, assistant_message, call, outputs

CHILD = Path(__file__).with_name("budget_child.py")
RUN = {"call4agents_run_id": "ticket-7"}
NOTE = "do not start new work"  # from BudgetUsage.wrap_up_note()


@pytest.fixture
def outbox(tmp_path: Path) -> Outbox:
    return Outbox(tmp_path / "outbox.jsonl")


def mailer(outbox: Outbox) -> FunctionTool:
    @function_tool
    def send_email(to: str) -> str:
        """Send an email."""
        outbox.send(to)
        return f"sent to {to}"

    return send_email


def step(*items: TResponseOutputItem, tokens: tuple[int, int] = (0, 0)) -> ModelStep:
    """One model response, with the token counts a real model would report."""
    usage = Usage(
        requests=1, input_tokens=tokens[0], output_tokens=tokens[1], total_tokens=sum(tokens)
    )
    return ModelStep(output=list(items), usage=usage)


def emails(*people: str, tokens: tuple[int, int] = (0, 0)) -> ScriptedModel:
    """A model that asks for one email per turn, then says it is done."""
    steps = [step(call("send_email", f"c-{p}", to=p), tokens=tokens) for p in people]
    return ScriptedModel([*steps, step(assistant_message("all sent"), tokens=tokens)])


def agent_for(model: ScriptedModel, *tools: FunctionTool, **kwargs: Any) -> Agent[Any]:
    return Agent(name="support", model=model, tools=list(tools), **kwargs)


def seen_by_model(model: ScriptedModel) -> list[str]:
    """Everything the model was sent, request by request: instructions and input."""
    return [f"{c.system_instructions}\n{json.dumps(c.input, default=str)}" for c in model.calls]


def status_of(ledger: c4a.Ledger, run_id: str = "ticket-7") -> tuple[str, str | None]:
    found = ledger.run_status(run_id)
    assert found is not None
    return found.status, found.reason


def usage_of(ledger: c4a.Ledger, budget: c4a.Budget, run_id: str = "ticket-7") -> c4a.BudgetUsage:
    with c4a.run(run_id, ledger=ledger, budget=budget):
        return c4a.budget_usage(ledger=ledger)


# -- budgets --------------------------------------------------------------------------------------


async def test_the_tool_call_limit_ends_the_run(ledger: c4a.Ledger, outbox: Outbox) -> None:
    budget = c4a.Budget(max_tool_calls=2)
    model = emails("ann", "bob", "cat")
    agent = OnceOnly(budget=budget).wrap(agent_for(model, mailer(outbox)))
    with pytest.raises(c4a.BudgetExceeded) as ended:
        await Runner.run(agent, "go", context=dict(RUN))
    assert (ended.value.reason, ended.value.detail) == ("step_limit", "2 tool calls")
    # It left the run the SDK's way, with the SDK's record of the run attached.
    assert isinstance(ended.value, AgentsException)
    assert ended.value.run_data is not None
    assert [line["to"] for line in outbox.lines()] == ["ann", "bob"]
    assert len(model.calls) == 3  # the model never got the refusal as a tool result
    assert not any("step limit" in seen for seen in seen_by_model(model))
    assert [r.args["to"] for r in ledger.effects("ticket-7")] == ["ann", "bob"]
    assert status_of(ledger) == ("step_limit", "2 tool calls")


async def test_the_model_request_limit_ends_the_run_before_the_request(
    ledger: c4a.Ledger, outbox: Outbox
) -> None:
    budget = c4a.Budget(max_model_requests=2)
    model = emails("ann", "bob")
    agent = OnceOnly(budget=budget).wrap(agent_for(model, mailer(outbox)))
    with pytest.raises(c4a.BudgetExceeded) as ended:
        await Runner.run(agent, "go", context=dict(RUN))
    assert (ended.value.reason, ended.value.detail) == ("step_limit", "2 model requests")
    assert len(model.calls) == 2  # the third request was never sent
    assert outbox.count() == 2
    assert usage_of(ledger, budget).model_requests == 2
    assert status_of(ledger) == ("step_limit", "2 model requests")


async def test_a_per_tool_limit_cuts_only_that_tool(ledger: c4a.Ledger, outbox: Outbox) -> None:
    texts: list[str] = []

    @function_tool
    def send_sms(to: str) -> str:
        """Text a customer."""
        texts.append(to)
        return f"texted {to}"

    model = ScriptedModel(
        [
            step(call("send_email", "c1", to="ann")),
            step(call("send_email", "c2", to="bob")),
            step(call("send_sms", "c3", to="ann")),
            step(call("send_email", "c4", to="cat")),
            step(assistant_message("done")),
        ]
    )
    budget = c4a.Budget(max_calls_per_tool=2)
    agent = OnceOnly(budget=budget).wrap(agent_for(model, mailer(outbox), send_sms))
    with pytest.raises(c4a.BudgetExceeded) as ended:
        await Runner.run(agent, "go", context=dict(RUN))
    assert (ended.value.reason, ended.value.detail) == ("step_limit", "2 calls of send_email")
    assert [line["to"] for line in outbox.lines()] == ["ann", "bob"]
    assert texts == ["ann"]  # another tool keeps its own allowance
    assert usage_of(ledger, budget).per_tool == {"send_email": 2, "send_sms": 1}


async def test_the_deadline_ends_a_later_run(ledger: c4a.Ledger, outbox: Outbox) -> None:
    once = OnceOnly(budget=c4a.Budget(deadline=3600))
    await Runner.run(once.wrap(agent_for(emails("ann"), mailer(outbox))), "go", context=dict(RUN))
    # An hour passes (moved in the ledger rather than waited for), then the run goes on.
    with ledger.engine.begin() as conn:
        conn.execute(
            update(run_counters)
            .where(run_counters.c.run_id == "ticket-7", run_counters.c.name == "started_at")
            .values(value=run_counters.c.value - 3601)
        )
    later = emails("bob")
    with pytest.raises(c4a.BudgetExceeded) as ended:
        await Runner.run(once.wrap(agent_for(later, mailer(outbox))), "go", context=dict(RUN))
    assert ended.value.reason == "deadline"
    assert len(later.calls) == 0  # no request was sent past the deadline
    assert [line["to"] for line in outbox.lines()] == ["ann"]
    assert status_of(ledger)[0] == "deadline"


def test_run_sync_ends_the_same_way(ledger: c4a.Ledger, outbox: Outbox) -> None:
    agent = OnceOnly(budget=c4a.Budget(max_model_requests=1)).wrap(
        agent_for(emails("ann"), mailer(outbox))
    )
    with pytest.raises(c4a.BudgetExceeded, match="1 model requests"):
        Runner.run_sync(agent, "go", context=dict(RUN))
    assert outbox.count() == 1


async def test_a_streamed_run_ends_the_same_way(ledger: c4a.Ledger, outbox: Outbox) -> None:
    agent = OnceOnly(budget=c4a.Budget(max_model_requests=1)).wrap(
        agent_for(emails("ann"), mailer(outbox))
    )
    streamed = Runner.run_streamed(agent, "go", context=dict(RUN))
    with pytest.raises(c4a.BudgetExceeded, match="1 model requests"):
        async for _ in streamed.stream_events():
            pass
    assert outbox.count() == 1


async def test_the_cost_ceiling_is_fed_from_the_models_usage(
    ledger: c4a.Ledger, outbox: Outbox
) -> None:
    # Each response reports 1000 input and 500 output tokens: 0.003 + 0.0075 at these prices.
    budget = c4a.Budget(max_cost=0.02, token_prices=(3.0, 15.0))
    model = emails("ann", "bob", tokens=(1000, 500))
    agent = OnceOnly(budget=budget).wrap(agent_for(model, mailer(outbox)))
    with pytest.raises(c4a.BudgetExceeded) as ended:
        await Runner.run(agent, "go", context=dict(RUN))
    assert ended.value.reason == "budget"
    assert ended.value.tool == "send_email"  # bob's email was refused: 0.021 already spent
    assert [line["to"] for line in outbox.lines()] == ["ann"]
    usage = usage_of(ledger, budget)
    assert (usage.input_tokens, usage.output_tokens) == (2000, 1000)
    assert usage.cost == pytest.approx(0.021)
    assert status_of(ledger)[0] == "budget"


async def test_the_wrap_up_note_reaches_the_model(ledger: c4a.Ledger, outbox: Outbox) -> None:
    budget = c4a.Budget(max_model_requests=5, soft=0.8)
    model = emails("ann", "bob", "cat", "dan")  # five requests: the last one is past 80%

    def instructions(ctx: RunContextWrapper[Any], agent: Agent[Any]) -> str:
        return f"You are {agent.name}."  # the agent's own dynamic instructions still apply

    agent = agent_for(model, mailer(outbox), instructions=instructions)
    result = await Runner.run(OnceOnly(budget=budget).wrap(agent), "go", context=dict(RUN))
    assert result.final_output == "all sent"
    sent = [c.system_instructions for c in model.calls]
    assert sent[:4] == ["You are support."] * 4  # 4 of 5 requests are spent only after the 4th
    assert sent[4] is not None
    assert sent[4].startswith("You are support.\n\nNote from the run's budget: 80% of a limit")
    assert NOTE in sent[4]


async def test_an_enclosing_run_with_a_budget_keeps_working(
    ledger: c4a.Ledger, outbox: Outbox
) -> None:
    heard: list[str] = []

    class Own(AgentHooks[Any]):  # the agent's own hooks still run beside the budget's
        async def on_llm_start(
            self,
            context: RunContextWrapper[Any],
            agent: Agent[Any],
            system_prompt: str | None,
            input_items: list[TResponseInputItem],
        ) -> None:
            heard.append("llm_start")

        async def on_llm_end(
            self, context: RunContextWrapper[Any], agent: Agent[Any], response: ModelResponse
        ) -> None:
            heard.append("llm_end")

    agent = agent_for(emails("ann", "bob", tokens=(10, 5)), mailer(outbox), hooks=Own())
    budget = c4a.Budget(max_model_requests=2)
    with (
        c4a.run("ticket-7", budget=budget),
        pytest.raises(c4a.BudgetExceeded, match="2 model requests"),
    ):
        await Runner.run(OnceOnly().wrap(agent), "go", context=dict(RUN))
    assert heard == ["llm_start", "llm_end"] * 2
    usage = usage_of(ledger, budget)
    assert (usage.model_requests, usage.tool_calls, usage.input_tokens) == (2, 2, 20)


async def test_an_enclosing_budget_and_the_agents_own_both_apply(
    ledger: c4a.Ledger, outbox: Outbox
) -> None:
    once = OnceOnly(budget=c4a.Budget(max_tool_calls=1))
    agent = once.wrap(agent_for(emails("ann", "bob"), mailer(outbox)))
    with (
        c4a.run("job-1", budget=c4a.Budget(max_tool_calls=5)),
        pytest.raises(c4a.BudgetExceeded, match="1 tool calls") as caught,
    ):
        await Runner.run(agent, "go", context=dict(RUN))
    assert caught.value.run_id == RUN["call4agents_run_id"]  # the agent's own limit was hit
    assert [line["to"] for line in outbox.lines()] == ["ann"]
    job = usage_of(ledger, c4a.Budget(max_tool_calls=5), "job-1")
    assert job.tool_calls == 1  # counted against the enclosing run too


async def test_an_agent_used_as_a_tool_counts_against_the_parent(
    ledger: c4a.Ledger, outbox: Outbox
) -> None:
    budget = c4a.Budget(max_tool_calls=1, max_model_requests=10)
    once = OnceOnly(budget=budget)
    writer_model = emails("ann", "bob")
    writer = agent_for(writer_model, mailer(outbox))
    lead_model = ScriptedModel(
        [[call("writer", "w1", input="email ann and bob")], [assistant_message("done")]]
    )
    lead = Agent(
        name="lead",
        model=lead_model,
        tools=[once.wrap(writer).as_tool("writer", "Writes and sends emails")],
    )
    # The writer's second email is cut inside the nested run, and the cut ends the lead's run
    # too, rather than reaching the lead's model as the agent-tool's error text.
    with pytest.raises(c4a.BudgetExceeded, match="1 tool calls"):
        await Runner.run(once.wrap(lead), "go", context=dict(RUN))
    assert (len(lead_model.calls), len(writer_model.calls)) == (1, 2)
    assert [line["to"] for line in outbox.lines()] == ["ann"]
    usage = usage_of(ledger, budget)
    assert (usage.model_requests, usage.tool_calls) == (3, 1)  # lead 1 + writer 2


async def test_a_budget_needs_a_run_id(ledger: c4a.Ledger) -> None:
    agent = Agent(name="chat", model=ScriptedModel([[assistant_message("hi")]]))
    with pytest.raises(c4a.ConfigurationError, match="no stable id to count them under"):
        await Runner.run(OnceOnly(budget=c4a.Budget(max_model_requests=3)).wrap(agent), "hi")
    # Without a budget, a run with no side effects needs no id at all.
    again = Agent(name="chat", model=ScriptedModel([[assistant_message("hi")]]))
    assert (await Runner.run(OnceOnly().wrap(again), "hi")).final_output == "hi"


def test_wrapping_twice_counts_each_request_once(ledger: c4a.Ledger, outbox: Outbox) -> None:
    once = OnceOnly(budget=c4a.Budget(max_model_requests=10))
    agent = once.wrap(once.wrap(agent_for(emails("ann"), mailer(outbox))))
    Runner.run_sync(agent, "go", context=dict(RUN))
    assert usage_of(ledger, c4a.Budget(max_model_requests=10)).model_requests == 2


def test_bad_run_control_options_fail_at_once() -> None:
    with pytest.raises(c4a.ConfigurationError, match=r"takes a c4a\.Budget"):
        OnceOnly(budget={"max_tool_calls": 3})  # type: ignore[arg-type]
    with pytest.raises(
        c4a.ConfigurationError,
        match=r"escalate_on=\['in-doubt'\] is not understood \(in OnceOnly\): use any of "
        r"'denied', 'in_doubt', 'budget'",
    ):
        OnceOnly(escalate_on=["in-doubt"])


@pytest.mark.parametrize(("limit", "kind"), [("3", "tool_calls"), ("5", "model_requests")])
def test_the_budget_survives_a_sigkill_and_a_resume(
    target: Target, tmp_path: Path, limit: str, kind: str
) -> None:
    out = Outbox(tmp_path / "outbox.jsonl")
    killed = run_child(CHILD, "job-b", str(out.path), kind, limit, "2", env=target.env())
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert [line["to"] for line in out.lines()] == ["u0", "u1"]
    resumed = run_child(CHILD, "job-b", str(out.path), kind, limit, env=target.env())
    assert resumed.returncode == 0, resumed.stderr
    # The resumed run replays u0 and u1 from the ledger; a count that started again at zero
    # would have let u3 through as well.
    assert json.loads(resumed.stdout)["ended"] == "step_limit"
    assert [line["to"] for line in out.lines()] == ["u0", "u1", "u2"]
    ledger = target.open()
    assert status_of(ledger, "job-b")[0] == "step_limit"


def test_two_workers_share_one_budget(target: Target, tmp_path: Path) -> None:
    out = Outbox(tmp_path / "outbox.jsonl")
    args = ["job-w", str(out.path), "tool_calls", "4"]
    runs = [
        (args, dict(target.env(), RECIPIENTS=people)) for people in ("a0,a1,a2,a3", "b0,b1,b2,b3")
    ]
    workers = forked.run_together(CHILD, runs)
    assert [w.returncode for w in workers] == [0, 0], [w.stderr for w in workers]
    endings = [json.loads(w.stdout)["ended"] for w in workers]
    assert out.count() == 4  # four in all, not four each
    assert "step_limit" in endings


# -- escalation -----------------------------------------------------------------------------------


def cli(target: Target, *argv: str) -> int:
    full = [*argv, "--url", target.url, *(["--schema", target.schema] if target.schema else [])]
    return cli_main(full)


def ticketing(outbox: Outbox) -> list[FunctionTool]:
    @function_tool
    def open_ticket(title: str) -> dict[str, Any]:
        """Open a support ticket."""
        outbox.send("tracker", title=title)
        return {"ticket_id": "T-1", "title": title}

    @function_tool
    def refund(order: str, amount: int) -> str:
        """Refund an order."""
        if amount > 100:
            c4a.escalate(
                "refunds over 100 need a person",
                what_remains=[f"refund {amount} on {order} once approved"],
                blocking_fact=f"the refund is {amount}",
            )
        outbox.send("bank", amount=amount)
        return "refunded"

    return [open_ticket, refund]


async def test_escalating_from_a_tool_ends_the_run_with_the_handoff(
    ledger: c4a.Ledger, target: Target, outbox: Outbox, capsys: pytest.CaptureFixture[str]
) -> None:
    model = ScriptedModel(
        [
            [call("open_ticket", "c1", title="Refund A-7")],
            [call("refund", "c2", order="A-7", amount=500)],
            [assistant_message("never reached")],
        ]
    )
    agent = OnceOnly().wrap(agent_for(model, *ticketing(outbox)))
    with pytest.raises(c4a.Escalated) as ended:
        await Runner.run(agent, "refund A-7", context=dict(RUN))
    handoff = ended.value.handoff
    assert (handoff.run_id, handoff.reason) == ("ticket-7", "refunds over 100 need a person")
    assert [(d["tool"], d["result"], d["external_ids"]) for d in handoff.done] == [
        ("open_ticket", {"ticket_id": "T-1", "title": "Refund A-7"}, {"ticket_id": "T-1"})
    ]
    assert [(f["tool"], f["args"]) for f in handoff.failed] == [
        ("refund", {"order": "A-7", "amount": 500})
    ]
    assert handoff.what_remains == ["refund 500 on A-7 once approved"]
    assert [line["to"] for line in outbox.lines()] == ["tracker"]  # no money moved
    assert len(model.calls) == 2  # the model was not asked to work around it
    assert isinstance(ended.value, AgentsException)
    assert ended.value.run_data is not None
    assert status_of(ledger) == ("escalated", "refunds over 100 need a person")
    [refund] = [r for r in ledger.effects("ticket-7") if r.tool == "refund"]
    assert refund.state == "failed"  # it handed over instead of acting

    assert cli(target, "show", "ticket-7") == 0
    shown = capsys.readouterr().out
    assert "Run ticket-7 was escalated: refunds over 100 need a person" in shown
    assert "external ids: ticket_id=T-1" in shown
    assert cli(target, "show", "ticket-7", "--handoff", "--json") == 0
    doc = json.loads(capsys.readouterr().out)
    assert [d["tool"] for d in doc["done"]] == ["open_ticket"]
    assert [f["tool"] for f in doc["failed"]] == ["refund"]


async def test_an_approval_policy_can_escalate(ledger: c4a.Ledger, outbox: Outbox) -> None:
    def needs_a_person(order: str, amount: int) -> bool:
        if amount > 1000:
            c4a.escalate("refunds over 1000 go to the finance team", what_remains=["the refund"])
        return amount > 100

    model = ScriptedModel([[call("refund", "c1", order="A-7", amount=5000)]])
    once = OnceOnly(tools={"refund": {"approval": needs_a_person}})
    with pytest.raises(c4a.Escalated) as ended:
        await Runner.run(once.wrap(agent_for(model, *ticketing(outbox))), "go", context=dict(RUN))
    assert ended.value.handoff.done == []
    assert ledger.approvals("ticket-7") == []  # nobody is asked: the run was handed over
    assert outbox.count() == 0
    assert status_of(ledger)[0] == "escalated"


async def test_escalate_on_in_doubt(ledger: c4a.Ledger, outbox: Outbox) -> None:
    @function_tool
    def wire(to: str) -> str:
        """Wire money."""
        outbox.send(to)
        raise c4a.OutcomeUnknown("the bank hung up")

    model = ScriptedModel(
        [
            [call("send_email", "c1", to="ann")],
            [call("wire", "c2", to="bob")],
            [assistant_message("")],
        ]
    )
    agent = OnceOnly(escalate_on=["in_doubt"]).wrap(agent_for(model, mailer(outbox), wire))
    with pytest.raises(c4a.Escalated) as ended:
        await Runner.run(agent, "go", context=dict(RUN))
    handoff = ended.value.handoff
    assert handoff.reason == "wire may or may not have happened"
    assert handoff.blocking_fact == "OutcomeUnknown: the bank hung up"
    assert [d["tool"] for d in handoff.done] == ["send_email"]
    assert [(d["tool"], d["why"]) for d in handoff.in_doubt] == [
        ("wire", "OutcomeUnknown: the bank hung up")
    ]
    key = handoff.in_doubt[0]["key"][:12]
    assert handoff.what_remains == [
        "check with the provider whether this happened, then settle it in the console (In "
        f"doubt, or this run's page) or with `call4agents resolve {key} --happened` (or "
        '`--did-not-happen`): wire {"to":"bob"}'
    ]
    assert len(model.calls) == 2


async def test_escalate_on_a_recorded_no(ledger: c4a.Ledger, outbox: Outbox) -> None:
    once = OnceOnly(tools={"refund": {"approval": True}}, escalate_on=["denied"])

    def agent() -> Agent[Any]:
        model = ScriptedModel(
            [[call("refund", "c1", order="A-7", amount=50)], [assistant_message("")]]
        )
        return once.wrap(agent_for(model, *ticketing(outbox)))

    paused = await Runner.run(agent(), "go", context=dict(RUN))
    assert len(paused.interruptions) == 1
    [ticket] = ledger.approvals("ticket-7", state="pending")
    ledger.deny(ticket.ticket, by="ann", reason="duplicate claim")
    with pytest.raises(c4a.Escalated) as ended:  # the job runs again and meets the no
        await Runner.run(agent(), "go", context=dict(RUN))
    handoff = ended.value.handoff
    assert (handoff.reason, handoff.blocking_fact) == (
        "a person denied refund",
        "denied by ann: duplicate claim",
    )
    assert handoff.what_remains == [
        'decide with the requester what to do instead of: refund {"amount":50,"order":"A-7"}'
    ]
    assert outbox.count() == 0


async def test_escalate_on_budget(ledger: c4a.Ledger, outbox: Outbox) -> None:
    once = OnceOnly(budget=c4a.Budget(max_model_requests=1), escalate_on=["budget"])
    agent = once.wrap(agent_for(emails("ann", "bob"), mailer(outbox)))
    with pytest.raises(c4a.Escalated) as ended:
        await Runner.run(agent, "go", context=dict(RUN))
    handoff = ended.value.handoff
    assert (handoff.reason, handoff.blocking_fact) == (
        "the run hit its step limit",
        "1 model requests",
    )
    assert handoff.what_remains == ["model request"]
    assert [d["args"] for d in handoff.done] == [{"to": "ann"}]
    assert status_of(ledger)[0] == "escalated"
    status = ledger.run_status("ticket-7")
    assert status is not None
    assert status.details["budget"]["reason"] == "step_limit"


async def test_escalate_on_budget_cuts_a_tool_call(ledger: c4a.Ledger, outbox: Outbox) -> None:
    once = OnceOnly(budget=c4a.Budget(max_tool_calls=1), escalate_on=["budget"])
    agent = once.wrap(agent_for(emails("ann", "bob"), mailer(outbox)))
    with pytest.raises(c4a.Escalated) as ended:
        await Runner.run(agent, "go", context=dict(RUN))
    assert isinstance(ended.value, AgentsException)  # ended as the SDK ends its own runs
    handoff = ended.value.handoff
    assert (handoff.reason, handoff.blocking_fact) == ("the run hit its step limit", "1 tool calls")
    assert handoff.what_remains == ['send_email {"to":"bob"}']
    assert [d["args"] for d in handoff.done] == [{"to": "ann"}]
    assert [line["to"] for line in outbox.lines()] == ["ann"]
    assert status_of(ledger) == ("escalated", "the run hit its step limit")


async def test_escalate_on_adds_to_each_tools_own(ledger: c4a.Ledger, outbox: Outbox) -> None:
    @function_tool
    def wire(to: str) -> str:
        """Wire money."""
        outbox.send(to)
        raise c4a.OutcomeUnknown("the bank hung up")

    once = OnceOnly(tools={"send_email": {"escalate_on": ["budget"]}}, escalate_on=["in_doubt"])
    assert once.options_for("send_email").escalate_on == ("budget", "in_doubt")
    assert once.options_for("wire").escalate_on == ("in_doubt",)
    # A tool given its own options keeps them, with OnceOnly's policy added.
    model = ScriptedModel([[call("wire", "c1", to="bob")], [assistant_message("")]])
    own = once.tool(wire, c4a.EffectOptions(escalate_on=("denied",)))
    with pytest.raises(c4a.Escalated) as ended:
        await Runner.run(agent_for(model, own), "go", context=dict(RUN))
    assert ended.value.handoff.reason == "wire may or may not have happened"
    assert [line["to"] for line in outbox.lines()] == ["bob"]
    assert len(model.calls) == 1


# -- undo and find-existing -----------------------------------------------------------------------


async def test_undo_a_run_made_through_the_sdk(ledger: c4a.Ledger, outbox: Outbox) -> None:
    refunds: list[str] = []

    def refund(result: dict[str, Any], *, customer: str, amount: int) -> None:
        refunds.append(result["charge_id"])

    @function_tool
    def charge(customer: str, amount: int) -> dict[str, Any]:
        """Charge a customer."""
        outbox.send(customer, amount=amount)
        return {"charge_id": f"ch_{customer}"}

    model = ScriptedModel(
        [
            [call("charge", "c1", customer="ann", amount=10)],
            [call("charge", "c2", customer="bob", amount=20)],
            [assistant_message("charged both")],
        ]
    )
    once = OnceOnly(tools={"charge": {"undo": refund}})
    await Runner.run(once.wrap(agent_for(model, charge)), "go", context=dict(RUN))
    report = ledger.undo("ticket-7")
    assert report.status == "undone"
    assert refunds == ["ch_bob", "ch_ann"]  # newest first
    assert ledger.undo("ticket-7").status == "undone"
    assert refunds == ["ch_bob", "ch_ann"]  # each undo once
    assert status_of(ledger)[0] == "undone"


async def test_find_existing_records_the_found_resource(ledger: c4a.Ledger) -> None:
    tracker: list[dict[str, Any]] = []  # an issue tracker without idempotency keys

    def find_ticket(title: str) -> dict[str, Any] | None:
        return c4a.find_marked(tracker, lambda t: t["title"])

    @function_tool
    def open_ticket(title: str) -> dict[str, Any]:
        """Open a ticket."""
        ticket = {"id": f"T-{len(tracker) + 1}", "title": f"{title} {c4a.key_marker()}"}
        tracker.append(ticket)
        if len(tracker) == 1:
            raise ValueError("the tracker's answer could not be read")  # but it did create it
        return ticket

    model = ScriptedModel(
        [
            [call("open_ticket", "c1", title="Printer on fire")],
            [call("open_ticket", "c2", title="Printer on fire")],  # the model tries again
            [assistant_message("ticket open")],
        ]
    )
    once = OnceOnly(tools={"open_ticket": {"find_existing": find_ticket}})
    result = await Runner.run(once.wrap(agent_for(model, open_ticket)), "go", context=dict(RUN))
    assert len(tracker) == 1  # found, not created twice
    [record] = ledger.effects("ticket-7")
    assert (record.state, record.result) == ("succeeded", tracker[0])
    assert "T-1" in outputs(result)[1]
