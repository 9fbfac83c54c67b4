"""Budgets and escalation on real Pydantic AI agents run by Pydantic AI's offline FunctionModel.

``OnceOnly(budget=...)`` counts tool calls and model requests in the ledger, with the tokens and
cost each response reports. Hitting a limit ends the run with ``c4a.BudgetExceeded`` raised out
of ``agent.run``; an escalation from a tool ends it with ``c4a.Escalated``. Neither is shown to
the model as a tool error, and neither is recorded as a tool's result.
"""

from __future__ import annotations

import asyncio
import json
import signal
import threading
from collections.abc import AsyncIterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import (
    Agent,
    DeferredToolRequests,
    DeferredToolResults,
    RunContext,
    ToolDenied,
)
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel
from pydantic_ai.usage import RequestUsage
from sqlalchemy import update

import call4agents as c4a
from call4agents.facade.cli import main as cli_main
from call4agents.storage.tables import run_counters
from call4agents_pydantic_ai import OnceOnly
from tests.conftest import Target, run_child
from tests.pydantic_ai.scripted import Outbox, scripted

CHILD = Path(__file__).with_name("budget_child.py")
NOTE = "do not start new work"  # from BudgetUsage.wrap_up_note()


class Emailer:
    """A model that emails one more customer at every step, seeing what each request carries.

    ``stop_after`` requests, it answers with text instead. Every response reports the given
    usage, as a real provider's would.
    """

    def __init__(self, *, stop_after: int | None = None, **usage: Any) -> None:
        self.instructions: list[str | None] = []
        self.stop_after = stop_after
        self.usage = usage

    def model(self) -> FunctionModel:
        return FunctionModel(self.respond, stream_function=self.stream)

    async def stream(self, messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[Any]:
        for i, part in enumerate(self.respond(messages, info).parts):
            if isinstance(part, ToolCallPart):
                args = part.args_as_json_str()
                yield {i: DeltaToolCall(part.tool_name, args, tool_call_id=part.tool_call_id)}
            elif isinstance(part, TextPart):
                yield part.content

    def respond(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.instructions.append(info.instructions)
        n = len(self.instructions) - 1
        usage = RequestUsage(**self.usage)
        if self.stop_after is not None and n >= self.stop_after:
            return ModelResponse(parts=[TextPart("all done")], usage=usage)
        call = ToolCallPart("send_email", {"to": f"u{n}@example.com", "body": "hi"}, f"call-{n}")
        return ModelResponse(parts=[call], usage=usage)


def email_agent(
    model: FunctionModel, outbox: Outbox, instructions: str | None = None, **once: Any
) -> Agent[None, str]:
    def send_email(to: str, body: str) -> dict[str, str]:
        """Email a customer."""
        outbox.send(to, body)
        return {"message_id": f"msg-{to}"}

    capabilities = [OnceOnly(**once)]
    return Agent(model, instructions=instructions, tools=[send_email], capabilities=capabilities)


def ended(ledger: c4a.Ledger, run_id: str) -> str | None:
    """How a run control ended the run, as recorded in the ledger."""
    status = ledger.run_status(run_id)
    return status.status if status is not None else None


def usage_of(run_id: str) -> c4a.BudgetUsage:
    with c4a.run(run_id, budget=c4a.Budget(max_tool_calls=1000)):
        return c4a.budget_usage()


# -- budgets ----------------------------------------------------------------------------------


def test_tool_call_limit_ends_the_run(target: Target, tmp_path: Path) -> None:
    ledger = c4a.init(target.open())
    outbox = Outbox(tmp_path / "outbox.jsonl")
    calls = [("send_email", {"to": f"u{i}@example.com", "body": "hi"}, f"c{i}") for i in range(3)]
    agent = email_agent(scripted(calls), outbox, budget=c4a.Budget(max_tool_calls=2))
    with pytest.raises(c4a.BudgetExceeded) as caught:
        agent.run_sync("Email everyone", conversation_id="tools-1")
    assert caught.value.reason == "step_limit"
    assert caught.value.detail == "2 tool calls"
    assert len(outbox.sent()) == 2  # the two calls beside the refused one finished
    # The refused call never started, so it is no tool's result in the ledger.
    assert [r.state for r in ledger.effects("tools-1")] == ["succeeded", "succeeded"]
    assert ended(ledger, "tools-1") == "step_limit"


def test_model_request_limit_ends_the_run(target: Target, tmp_path: Path) -> None:
    ledger = c4a.init(target.open())
    outbox = Outbox(tmp_path / "outbox.jsonl")
    emailer = Emailer()  # never stops by itself
    agent = email_agent(emailer.model(), outbox, budget=c4a.Budget(max_model_requests=3))
    with pytest.raises(c4a.BudgetExceeded) as caught:
        agent.run_sync("Email everyone", conversation_id="req-1")
    assert (caught.value.reason, caught.value.detail) == ("step_limit", "3 model requests")
    assert len(emailer.instructions) == 3  # the fourth request was never made
    assert len(outbox.sent()) == 3
    assert ended(ledger, "req-1") == "step_limit"
    assert usage_of("req-1").model_requests == 3


@pytest.mark.parametrize("driver", ["run", "run_stream", "iter"])
def test_every_way_of_running_ends_at_the_limit(
    sqlite_target: Target, tmp_path: Path, driver: str
) -> None:
    c4a.init(sqlite_target.open())
    outbox = Outbox(tmp_path / "outbox.jsonl")
    emailer = Emailer()
    agent = email_agent(emailer.model(), outbox, budget=c4a.Budget(max_model_requests=2))

    async def drive() -> None:
        if driver == "run":
            await agent.run("go", conversation_id="drv-1")
        elif driver == "run_stream":
            async with agent.run_stream("go", conversation_id="drv-1") as streamed:
                await streamed.get_output()
        else:
            async with agent.iter("go", conversation_id="drv-1") as run:
                async for _node in run:
                    pass

    with pytest.raises(c4a.BudgetExceeded, match="2 model requests"):
        asyncio.run(drive())
    assert len(emailer.instructions) == 2
    assert len(outbox.sent()) == 2


def test_cost_ceiling_from_the_models_token_counts(target: Target, tmp_path: Path) -> None:
    ledger = c4a.init(target.open())
    outbox = Outbox(tmp_path / "outbox.jsonl")
    emailer = Emailer(input_tokens=1000, output_tokens=100)  # 0.002 + 0.001 per response
    budget = c4a.Budget(max_cost=0.01, token_prices=(2.0, 10.0))
    agent = email_agent(emailer.model(), outbox, budget=budget)
    with pytest.raises(c4a.BudgetExceeded) as caught:
        agent.run_sync("Email everyone", conversation_id="cost-1")
    assert caught.value.reason == "budget"
    # Four responses cost 0.012: the fourth one's email is the first thing refused.
    assert len(emailer.instructions) == 4
    assert len(outbox.sent()) == 3
    usage = usage_of("cost-1")
    assert (usage.input_tokens, usage.output_tokens) == (4000, 400)
    assert usage.cost == pytest.approx(0.012)
    assert ended(ledger, "cost-1") == "budget"


def test_cost_reported_by_pydantic_ai_when_no_prices_are_given(
    target: Target, tmp_path: Path
) -> None:
    c4a.init(target.open())
    outbox = Outbox(tmp_path / "outbox.jsonl")
    # What a priced provider response carries: Pydantic AI's own cost figure, in USD.
    emailer = Emailer(input_tokens=10, output_tokens=1, cost=Decimal("0.004"))
    agent = email_agent(emailer.model(), outbox, budget=c4a.Budget(max_cost=0.01))
    with pytest.raises(c4a.BudgetExceeded, match="budget"):
        agent.run_sync("Email everyone", conversation_id="cost-2")
    assert len(emailer.instructions) == 3  # 0.012 after three responses
    assert len(outbox.sent()) == 2
    assert usage_of("cost-2").cost == pytest.approx(0.012)


def test_the_model_is_told_to_wrap_up_past_the_soft_threshold(
    target: Target, tmp_path: Path
) -> None:
    c4a.init(target.open())
    outbox = Outbox(tmp_path / "outbox.jsonl")
    emailer = Emailer(stop_after=4)  # five requests, the last one answers with text
    budget = c4a.Budget(max_model_requests=5, soft=0.6)
    # The note is added to the agent's own instructions.
    agent = email_agent(emailer.model(), outbox, instructions="Be brief.", budget=budget)
    result = agent.run_sync("Email everyone", conversation_id="soft-1")
    assert result.output == "all done"  # the soft threshold warns; it does not cut
    seen = emailer.instructions
    assert [NOTE in (text or "") for text in seen] == [False, False, True, True, True]
    assert all((text or "").startswith("Be brief.") for text in seen)
    assert "100% of a limit is spent" in (seen[-1] or "")


def test_the_deadline_holds_across_a_resumed_conversation(target: Target, tmp_path: Path) -> None:
    ledger = c4a.init(target.open())
    outbox = Outbox(tmp_path / "outbox.jsonl")
    budget = c4a.Budget(deadline=3600)
    calls = [("send_email", {"to": "u0@example.com", "body": "hi"}, "c0")]
    first = email_agent(scripted(calls), outbox, budget=budget)
    done = first.run_sync("Email u0", conversation_id="late-1")
    # An hour passes (moved in the ledger rather than waited for), then the conversation goes on.
    with ledger.engine.begin() as conn:
        conn.execute(
            update(run_counters)
            .where(run_counters.c.run_id == "late-1", run_counters.c.name == "started_at")
            .values(value=run_counters.c.value - 3601)
        )
    emailer = Emailer()
    later = email_agent(emailer.model(), outbox, budget=budget, ledger=target.open())
    with pytest.raises(c4a.BudgetExceeded) as caught:
        later.run_sync("And the others", message_history=done.all_messages())
    assert caught.value.reason == "deadline"
    assert emailer.instructions == []  # no request was made past the deadline
    assert outbox.sent() == ["u0@example.com"]
    assert ended(ledger, "late-1") == "deadline"


def test_budget_survives_a_crash_and_resume(target: Target, tmp_path: Path) -> None:
    env = target.env()
    killed = run_child(CHILD, "crash-1", str(tmp_path), "kill_after_2", env=env)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    resumed = run_child(CHILD, "crash-1", str(tmp_path), env=env)
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout) == {"ended": "step_limit"}
    # Three emails in all: the resume re-ran the second call from the ledger (free), sent one
    # more and was cut, instead of starting a fresh allowance of three.
    assert Outbox(tmp_path / "outbox.jsonl").sent() == [f"u{i}@example.com" for i in range(3)]
    c4a.init(target.open())
    usage = usage_of("crash-1")
    assert (usage.tool_calls, usage.model_requests) == (3, 4)
    assert (usage.input_tokens, usage.output_tokens) == (400, 40)


def test_two_workers_share_one_budget(target: Target, tmp_path: Path) -> None:
    outbox = Outbox(tmp_path / "outbox.jsonl")
    budget = c4a.Budget(max_tool_calls=3)
    first = [("send_email", {"to": f"u{i}@example.com", "body": "hi"}, f"a{i}") for i in range(2)]
    second = [("send_email", {"to": f"v{i}@example.com", "body": "hi"}, f"b{i}") for i in range(2)]
    # Two workers: each its own agent and its own connection to the same ledger.
    worker_a = email_agent(scripted(first), outbox, budget=budget, ledger=target.open())
    worker_b = email_agent(scripted(second), outbox, budget=budget, ledger=target.open())
    worker_a.run_sync("first batch", conversation_id="shared-1")
    with pytest.raises(c4a.BudgetExceeded, match="3 tool calls"):
        worker_b.run_sync("second batch", conversation_id="shared-1")
    assert len(outbox.sent()) == 3


def test_a_per_tool_limit_cuts_only_that_tool(target: Target, tmp_path: Path) -> None:
    ledger = c4a.init(target.open())
    outbox = Outbox(tmp_path / "outbox.jsonl")
    texts: list[str] = []
    agent = email_agent(
        scripted(
            [
                ("send_email", {"to": "u0@example.com", "body": "hi"}, "c0"),
                ("send_email", {"to": "u1@example.com", "body": "hi"}, "c1"),
                ("send_sms", {"to": "u0@example.com"}, "c2"),
                ("send_email", {"to": "u2@example.com", "body": "hi"}, "c3"),
            ]
        ),
        outbox,
        budget=c4a.Budget(max_calls_per_tool=2),
    )

    @agent.tool_plain
    def send_sms(to: str) -> str:
        """Text a customer."""
        texts.append(to)
        return f"texted {to}"

    with (
        pytest.raises(c4a.BudgetExceeded) as caught,
        Agent.parallel_tool_call_execution_mode("sequential"),
    ):
        agent.run_sync("Tell everyone", conversation_id="per-tool")
    assert (caught.value.reason, caught.value.detail) == ("step_limit", "2 calls of send_email")
    assert outbox.sent() == ["u0@example.com", "u1@example.com"]
    assert texts == ["u0@example.com"]  # another tool keeps its own allowance
    assert usage_of("per-tool").per_tool == {"send_email": 2, "send_sms": 1}
    assert ended(ledger, "per-tool") == "step_limit"


def test_an_enclosing_run_budget_counts_the_conversation(target: Target, tmp_path: Path) -> None:
    ledger = c4a.init(target.open())
    outbox = Outbox(tmp_path / "outbox.jsonl")
    calls = [("send_email", {"to": f"u{i}@example.com", "body": "hi"}, f"c{i}") for i in range(3)]
    agent = email_agent(scripted(calls), outbox)  # no budget of its own
    with pytest.raises(c4a.BudgetExceeded), c4a.run("job-7", budget=c4a.Budget(max_tool_calls=2)):
        agent.run_sync("Email everyone", conversation_id="conv-7")
    assert len(outbox.sent()) == 2
    assert [r.run_id for r in ledger.effects("conv-7")] == ["conv-7", "conv-7"]
    assert ended(ledger, "job-7") == "step_limit"  # counted against, and ended, the outer run


# -- delegation: agents called from a tool with usage=ctx.usage -------------------------------


def delegates(outbox: Outbox) -> tuple[Agent[None, str], Agent[None, str]]:
    """A delegate with no Call4Agents at all, and one with OnceOnly and a tool of its own."""

    def joke(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        usage = RequestUsage(input_tokens=1000, output_tokens=100)
        return ModelResponse(parts=[TextPart("a joke")], usage=usage)

    plain = Agent(FunctionModel(joke))
    email_calls = [("send_email", {"to": "team@example.com", "body": "joke"}, "d1")]
    with_tool = email_agent(scripted(email_calls), outbox)
    return plain, with_tool


def parent_agent(
    plain: Agent[None, str], with_tool: Agent[None, str], steps: int, budget: c4a.Budget
) -> tuple[Agent[None, str], list[str | None]]:
    async def ask_delegates(ctx: RunContext[None], topic: str) -> str:
        """Ask the joke agents."""
        # Pydantic AI's delegation: the delegates share the parent's usage.
        first = await plain.run(topic, usage=ctx.usage)
        conversation = f"{ctx.conversation_id}/{topic}"
        await with_tool.run(topic, usage=ctx.usage, conversation_id=conversation)
        return first.output

    seen: list[str | None] = []

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(info.instructions)
        n = len(seen) - 1
        usage = RequestUsage(input_tokens=10, output_tokens=1)
        if n >= steps:
            return ModelResponse(parts=[TextPart("done")], usage=usage)
        call = ToolCallPart("ask_delegates", {"topic": f"t{n}"}, f"p{n}")
        return ModelResponse(parts=[call], usage=usage)

    once = OnceOnly(budget=budget)
    return Agent(FunctionModel(respond), tools=[ask_delegates], capabilities=[once]), seen


def test_delegate_agents_count_against_the_parent(target: Target, tmp_path: Path) -> None:
    c4a.init(target.open())
    outbox = Outbox(tmp_path / "outbox.jsonl")
    plain, with_tool = delegates(outbox)
    budget = c4a.Budget(max_model_requests=100, token_prices=(1.0, 1.0))
    parent, _ = parent_agent(plain, with_tool, steps=2, budget=budget)
    result = parent.run_sync("Cheer the team up", conversation_id="parent-1")
    assert result.output == "done"
    usage = usage_of("parent-1")
    # The parent's 3 requests, and per step: 1 of the plain delegate, 2 of the tool delegate.
    assert usage.model_requests == 3 + 2 * 3 == result.usage.requests
    assert usage.input_tokens == result.usage.input_tokens  # every token counted, none twice
    assert usage.output_tokens == result.usage.output_tokens
    # The delegate's tool calls count against the parent's budget too.
    assert usage.per_tool == {"ask_delegates": 2, "send_email": 2}
    assert outbox.sent() == ["team@example.com"] * 2  # one conversation per topic


def test_a_delegates_requests_use_up_the_parents_budget(target: Target, tmp_path: Path) -> None:
    ledger = c4a.init(target.open())
    outbox = Outbox(tmp_path / "outbox.jsonl")
    plain, with_tool = delegates(outbox)
    parent, seen = parent_agent(plain, with_tool, steps=1, budget=c4a.Budget(max_model_requests=4))
    with pytest.raises(c4a.BudgetExceeded, match="4 model requests"):
        parent.run_sync("Cheer the team up", conversation_id="parent-2")
    # The parent's first request and the tool delegate's two are counted as they are made, the
    # plain delegate's one when the tool step ends: four, so the parent's second is refused.
    assert len(seen) == 1
    assert outbox.sent() == ["team@example.com"]
    assert usage_of("parent-2").model_requests == 4
    assert ended(ledger, "parent-2") == "step_limit"


def test_an_agent_used_as_a_tool_spends_its_own_budget_and_the_parents(
    target: Target, tmp_path: Path
) -> None:
    ledger = c4a.init(target.open())
    outbox = Outbox(tmp_path / "outbox.jsonl")
    # The helper has a generous budget of its own; the parent's smaller one still applies.
    helper = email_agent(
        Emailer(stop_after=3).model(), outbox, budget=c4a.Budget(max_tool_calls=10)
    )

    async def ask_helper(ctx: RunContext[None], task: str) -> str:
        """Hand a task to the mailing agent."""
        done = await helper.run(task, conversation_id=f"{ctx.conversation_id}/helper")
        return done.output

    calls = [("ask_helper", {"task": "mail the customers"}, "p1")]
    parent = Agent(
        scripted(calls),
        tools=[ask_helper],
        capabilities=[OnceOnly(budget=c4a.Budget(max_tool_calls=2))],
    )
    with pytest.raises(c4a.BudgetExceeded) as caught:
        parent.run_sync("Mail everyone", conversation_id="boss")
    # ask_helper and the first email are the parent's two calls: the second email is refused.
    assert (caught.value.run_id, caught.value.detail) == ("boss", "2 tool calls")
    assert outbox.sent() == ["u0@example.com"]
    assert usage_of("boss").per_tool == {"ask_helper": 1, "send_email": 1}
    assert usage_of("boss/helper").per_tool == {"send_email": 1}
    assert usage_of("boss/helper").model_requests == 2
    assert usage_of("boss").model_requests == 3  # the parent's own request and the helper's
    assert ended(ledger, "boss") == "step_limit"


# -- escalation -------------------------------------------------------------------------------


def escalating_agent(outbox: Outbox, calls: list[tuple[str, dict[str, Any], str]]) -> Any:
    requests: list[int] = []
    escalating = threading.Event()

    async def send_email(to: str, body: str) -> dict[str, str]:
        """Email a customer."""
        # Still running when its sibling escalates (Pydantic AI would cancel it half-way).
        await asyncio.to_thread(escalating.wait, 30)
        await asyncio.sleep(0.2)
        outbox.send(to, body)
        return {"message_id": f"msg-{to}"}

    def refund(order: str, amount: int) -> dict[str, str]:
        """Refund an order."""
        if amount > 100:
            escalating.set()
            c4a.escalate(
                "refunds over 100 need a person",
                what_remains=[f"refund {amount} on {order} once approved"],
                blocking_fact=f"the refund is {amount}",
            )
        return {"refund_id": f"re_{order}"}

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        requests.append(len(messages))
        if len(requests) > 1:
            return ModelResponse(parts=[TextPart("done")])
        return ModelResponse(parts=[ToolCallPart(n, a, tool_call_id=i) for n, a, i in calls])

    agent = Agent(FunctionModel(respond), tools=[send_email, refund], capabilities=[OnceOnly()])
    return agent, requests


def test_escalate_inside_a_tool_ends_the_run(
    target: Target, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ledger = c4a.init(target.open())
    outbox = Outbox(tmp_path / "outbox.jsonl")
    calls = [
        ("refund", {"order": "o-1", "amount": 20}, "c1"),
        ("send_email", {"to": "bob@example.com", "body": "on its way"}, "c2"),
        ("refund", {"order": "o-2", "amount": 500}, "c3"),
    ]
    agent, requests = escalating_agent(outbox, calls)
    with pytest.raises(c4a.Escalated) as caught:
        agent.run_sync("Handle the refunds", conversation_id="esc-1")
    assert len(requests) == 1  # the model never saw the escalation as a tool error
    handoff = caught.value.handoff
    assert handoff.run_id == "esc-1"
    assert handoff.reason == "refunds over 100 need a person"
    # The email finished after its sibling escalated: done, not in doubt.
    done = sorted((d["tool"], d["external_ids"]) for d in handoff.done)
    assert done == [
        ("refund", {"refund_id": "re_o-1"}),
        ("send_email", {"message_id": "msg-bob@example.com"}),
    ]
    assert handoff.in_doubt == []
    [failed] = handoff.failed  # the escalating tool handed over instead of acting
    assert (failed["tool"], failed["args"]) == ("refund", {"order": "o-2", "amount": 500})
    assert outbox.sent() == ["bob@example.com"]
    assert ended(ledger, "esc-1") == "escalated"

    args = ["--url", target.url, *(["--schema", target.schema] if target.schema else [])]
    assert cli_main(["show", "esc-1", *args]) == 0
    shown = capsys.readouterr().out
    assert "was escalated: refunds over 100 need a person" in shown
    assert "external ids: message_id=msg-bob@example.com" in shown
    assert "  - refund 500 on o-2 once approved" in shown
    assert cli_main(["show", "esc-1", "--handoff", "--json", *args]) == 0
    given = json.loads(capsys.readouterr().out)
    assert given["status"] == "escalated"
    assert sorted(d["tool"] for d in given["done"]) == ["refund", "send_email"]
    assert [f["tool"] for f in given["failed"]] == ["refund"]


def test_no_call_starts_after_an_escalation(target: Target, tmp_path: Path) -> None:
    ledger = c4a.init(target.open())
    outbox = Outbox(tmp_path / "outbox.jsonl")
    calls = [
        ("refund", {"order": "o-2", "amount": 500}, "c1"),
        ("send_email", {"to": "bob@example.com", "body": "refunded"}, "c2"),
    ]
    agent, _ = escalating_agent(outbox, calls)
    with pytest.raises(c4a.Escalated), Agent.parallel_tool_call_execution_mode("sequential"):
        agent.run_sync("Handle the refund", conversation_id="esc-2")
    assert outbox.sent() == []  # the email came after the escalation: never started
    assert [r.tool for r in ledger.effects("esc-2")] == ["refund"]


def test_escalate_from_policy_code_inside_the_run(target: Target, tmp_path: Path) -> None:
    ledger = c4a.init(target.open())
    outbox = Outbox(tmp_path / "outbox.jsonl")
    calls = [("send_email", {"to": "bob@example.com", "body": "on its way"}, "c1")]
    agent = email_agent(scripted(calls), outbox)

    @agent.output_validator
    def policy(output: str) -> str:
        # The app's own rule, run inside the agent's run: no `with c4a.run(...)` needed.
        if "bob@example.com" in output:
            c4a.escalate("Bob's account is flagged", what_remains="check Bob's refund")
        return output

    with pytest.raises(c4a.Escalated) as caught:
        agent.run_sync("Tell Bob", conversation_id="esc-3")
    assert caught.value.run_id == "esc-3"
    assert [d["tool"] for d in caught.value.handoff.done] == ["send_email"]
    assert caught.value.handoff.what_remains == ["check Bob's refund"]
    assert ended(ledger, "esc-3") == "escalated"


@pytest.mark.parametrize(
    ("limit", "detail", "sent"),
    [("max_model_requests", "2 model requests", 2), ("max_tool_calls", "2 tool calls", 2)],
)
def test_escalate_on_budget_hands_the_run_over(
    target: Target, tmp_path: Path, limit: str, detail: str, sent: int
) -> None:
    ledger = c4a.init(target.open())
    outbox = Outbox(tmp_path / "outbox.jsonl")
    emailer = Emailer()  # never stops by itself
    budget = c4a.Budget(**{limit: 2})
    agent = email_agent(emailer.model(), outbox, budget=budget, escalate_on=["budget"])
    with pytest.raises(c4a.Escalated) as caught:
        agent.run_sync("Email everyone", conversation_id="esc-budget")
    handoff = caught.value.handoff
    assert (handoff.reason, handoff.blocking_fact) == ("the run hit its step limit", detail)
    assert [d["args"]["to"] for d in handoff.done] == [f"u{i}@example.com" for i in range(sent)]
    assert isinstance(caught.value.__cause__, c4a.BudgetExceeded)
    assert len(outbox.sent()) == sent
    status = ledger.run_status("esc-budget")
    assert status is not None
    assert status.status == "escalated"
    assert status.details["budget"]["detail"] == detail  # the cut is kept beside it


def test_escalate_on_in_doubt_hands_the_run_over(target: Target, tmp_path: Path) -> None:
    ledger = c4a.init(target.open())
    outbox = Outbox(tmp_path / "outbox.jsonl")

    def wire(to: str, amount: int) -> str:
        """Wire money."""
        outbox.send(to, f"{amount}")
        raise c4a.OutcomeUnknown("the bank hung up")

    calls = [("wire", {"to": "bob", "amount": 90}, "w1")]
    agent = Agent(scripted(calls), tools=[wire], capabilities=[OnceOnly(escalate_on="in_doubt")])
    with pytest.raises(c4a.Escalated) as caught:
        agent.run_sync("Pay Bob", conversation_id="esc-doubt")
    handoff = caught.value.handoff
    assert handoff.reason == "wire may or may not have happened"
    assert handoff.blocking_fact == "OutcomeUnknown: the bank hung up"
    assert [(d["tool"], d["why"]) for d in handoff.in_doubt] == [
        ("wire", "OutcomeUnknown: the bank hung up")
    ]
    assert [r.state for r in ledger.effects("esc-doubt")] == ["in_doubt"]
    assert ended(ledger, "esc-doubt") == "escalated"


def approval_agent(outbox: Outbox, **once: Any) -> Agent[None, Any]:
    def send_email(to: str, body: str) -> str:
        """Email a customer."""
        return outbox.send(to, body)

    calls = [("send_email", {"to": "bob@example.com", "body": "refund approved"}, "call-1")]
    once_only = OnceOnly(tools={"send_email": {"approval": True}}, **once)
    return Agent(
        scripted(calls),
        tools=[send_email],
        output_type=[str, DeferredToolRequests],
        capabilities=[once_only],
    )


@pytest.mark.parametrize("where", ["answers", "ledger"])
def test_escalate_on_denied_hands_the_run_over(target: Target, tmp_path: Path, where: str) -> None:
    ledger = c4a.init(target.open())
    outbox = Outbox(tmp_path / "outbox.jsonl")
    agent = approval_agent(outbox, escalate_on=["denied"])
    asked = agent.run_sync("Tell Bob", conversation_id="esc-no")
    assert isinstance(asked.output, DeferredToolRequests)
    [call] = asked.output.approvals
    answers = None
    if where == "answers":  # the app's DeferredToolResults carry the "no"
        answers = DeferredToolResults(
            approvals={call.tool_call_id: ToolDenied("wrong customer")},
            metadata=asked.output.metadata,
            answered_by={call.tool_call_id: "ann"},
        )
    else:  # a "no" given in the ledger, met when the conversation resumes
        [ticket] = ledger.approvals("esc-no", state="pending")
        ledger.deny(ticket.ticket, by="ann", reason="wrong customer")
    with pytest.raises(c4a.Escalated) as caught:
        agent.run_sync(message_history=asked.all_messages(), deferred_tool_results=answers)
    handoff = caught.value.handoff
    assert (handoff.reason, handoff.blocking_fact) == (
        "a person denied send_email",
        "denied by ann: wrong customer",
    )
    assert handoff.what_remains == [
        "decide with the requester what to do instead of: "
        'send_email {"body":"refund approved","to":"bob@example.com"}'
    ]
    assert outbox.sent() == []
    assert ended(ledger, "esc-no") == "escalated"


def test_without_escalate_on_a_no_goes_back_to_the_model(target: Target, tmp_path: Path) -> None:
    ledger = c4a.init(target.open())
    agent = approval_agent(Outbox(tmp_path / "outbox.jsonl"))
    asked = agent.run_sync("Tell Bob", conversation_id="no-esc")
    assert isinstance(asked.output, DeferredToolRequests)
    [call] = asked.output.approvals
    answers = DeferredToolResults(approvals={call.tool_call_id: ToolDenied("wrong customer")})
    done = agent.run_sync(message_history=asked.all_messages(), deferred_tool_results=answers)
    assert isinstance(done.output, str)
    assert ended(ledger, "no-esc") is None


def test_escalate_on_is_checked_and_added_to_each_tools_own() -> None:
    with pytest.raises(c4a.ConfigurationError, match=r"escalate_on=\['in-doubt'\] is not"):
        OnceOnly(escalate_on=["in-doubt"])
    once = OnceOnly(tools={"wire": {"escalate_on": ["budget"]}}, escalate_on=["in_doubt"])
    assert once.options("wire").escalate_on == ("budget", "in_doubt")
    assert once.options("send_email").escalate_on == ("in_doubt",)


# -- read-before-write ----------------------------------------------------------------------------


def test_a_found_resource_is_the_calls_result_and_the_tool_never_runs(
    target: Target, tmp_path: Path
) -> None:
    ledger = c4a.init(target.open())
    created: list[str] = []
    searched: list[str] = []

    def open_ticket(title: str) -> str:
        """Open a ticket."""
        created.append(title)
        return f"created {title}"

    def find_ticket(title: str) -> dict[str, str]:
        searched.append(c4a.current().key)  # asked inside the claimed action, before the tool
        return {"id": "T-9", "title": title}  # the tracker already has it

    calls = [("open_ticket", {"title": "refund o-7"}, "t1")]
    once = OnceOnly(tools={"open_ticket": {"find_existing": find_ticket}})
    agent = Agent(scripted(calls), tools=[open_ticket], capabilities=[once])
    done = agent.run_sync("Open a ticket", conversation_id="find-1")
    assert created == []
    [record] = ledger.effects("find-1")
    assert (record.state, record.result) == ("succeeded", {"id": "T-9", "title": "refund o-7"})
    assert searched == [record.key]
    # What the model was given: the found ticket, as a successful tool result.
    found = ["open_ticket", {"id": "T-9", "title": "refund o-7"}, "success"]
    assert json.loads(done.output) == [found]
    # The same call again (a resume replaying the history): the recorded result, no new search.
    agent.run_sync(message_history=done.all_messages()[:2])
    assert (created, searched) == ([], [record.key])


UNDO_CHILD = Path(__file__).with_name("undo_child.py")


def test_undo_of_a_conversation_survives_a_sigkill_half_way(target: Target, tmp_path: Path) -> None:
    """Each undo runs once: the one killed inside is reported in doubt, never run again."""
    world = tmp_path / "world.txt"
    acted = run_child(UNDO_CHILD, "act", "conv-undo", str(world), env=target.env())
    assert acted.returncode == 0, acted.stderr
    assert world.read_text().splitlines() == ["charge 1", "charge 2", "charge 3", "charge 4"]
    killed = run_child(
        UNDO_CHILD, "undo", "conv-undo", str(world), "inside_third_undo", env=target.env()
    )
    assert killed.returncode == -signal.SIGKILL
    resumed = run_child(UNDO_CHILD, "undo", "conv-undo", str(world), env=target.env())
    assert resumed.returncode == 0, resumed.stderr
    report = json.loads(resumed.stdout)
    assert [(i["args"]["amount"], i["outcome"]) for i in report["items"]] == [
        (4, "already_undone"),
        (3, "already_undone"),
        (2, "undo_in_doubt"),  # it refunded before the kill; the ledger cannot know, so not re-run
        (1, "undone"),
    ]
    assert report["status"] == "partly_undone"
    refunds = [line for line in world.read_text().splitlines() if line.startswith("refund")]
    assert refunds == ["refund 4", "refund 3", "refund 2", "refund 1"]  # each exactly once
