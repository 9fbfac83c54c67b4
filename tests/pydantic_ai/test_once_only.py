"""OnceOnly on a real Pydantic AI agent, driven by a scripted FunctionModel, in one process.

A "replay" re-runs the conversation from a saved history that ends with the model's tool calls,
which is what a resume after a crash does: Pydantic AI executes the pending calls again.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import Agent, FunctionToolset, ModelRetry, Tool
from pydantic_ai.exceptions import UserError
from pydantic_ai.messages import ModelMessage, ModelResponse, ToolReturn

import call4agents as c4a
from call4agents_pydantic_ai import OnceOnly
from tests.conftest import Target, run_child
from tests.pydantic_ai.scripted import Call, Outbox, child_env, returns_in, scripted

BOB = {"to": "bob@example.com", "body": "Your refund is on its way"}


@pytest.fixture
def outbox(tmp_path: Path) -> Outbox:
    return Outbox(tmp_path / "outbox.jsonl")


def frontier(messages: list[ModelMessage]) -> list[ModelMessage]:
    """The history as saved right after the model asked for its tool calls."""
    last = max(i for i, m in enumerate(messages) if isinstance(m, ModelResponse) and m.tool_calls)
    return messages[: last + 1]


def drive(agent: Agent[None, str], driver: str, **kwargs: Any) -> list[ModelMessage]:
    """One run of the agent through each of Pydantic AI's four ways to run it."""
    if driver == "run_sync":
        return agent.run_sync(**kwargs).all_messages()

    async def main() -> list[ModelMessage]:
        if driver == "run":
            return (await agent.run(**kwargs)).all_messages()
        if driver == "run_stream":
            async with agent.run_stream(**kwargs) as streamed:
                await streamed.get_output()
                return streamed.all_messages()
        async with agent.iter(**kwargs) as run:
            async for _ in run:
                pass
            assert run.result is not None
            return run.result.all_messages()

    return asyncio.run(main())


def email_agent(outbox: Outbox, *calls: Call, **once_only: Any) -> Agent[None, str]:
    return Agent(
        scripted(list(calls) or [("send_email", BOB, "c1")]),
        tools=[Tool(outbox.send, name="send_email")],
        capabilities=[OnceOnly(**once_only)],
    )


@pytest.mark.parametrize("driver", ["run", "run_sync", "run_stream", "iter"])
def test_a_replayed_conversation_gets_the_recorded_result(
    ledger: c4a.Ledger, outbox: Outbox, driver: str
) -> None:
    agent = email_agent(outbox)
    first = drive(agent, driver, user_prompt="Tell Bob", conversation_id="ticket-1")
    replayed = drive(agent, driver, message_history=frontier(first))
    assert outbox.sent() == ["bob@example.com"]
    sent = [["send_email", "sent to bob@example.com", "success"]]
    assert returns_in(first) == returns_in(replayed) == sent
    [record] = ledger.effects("ticket-1")
    assert (record.tool, record.state, record.args) == ("send_email", "succeeded", BOB)


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_sync_and_async_tools_see_their_run_and_call(ledger: c4a.Ledger, kind: str) -> None:
    seen: list[c4a.EffectContext] = []

    def sync_tool(to: str) -> str:
        seen.append(c4a.current())
        return "ok"

    async def async_tool(to: str) -> str:
        seen.append(c4a.current())
        return "ok"

    tool = Tool(sync_tool if kind == "sync" else async_tool, name="notify")
    agent: Agent[None, str] = Agent(
        scripted([("notify", {"to": "bob"}, "toolu_9")]), tools=[tool], capabilities=[OnceOnly()]
    )
    first = agent.run_sync("go", conversation_id="ticket-2")
    agent.run_sync(message_history=frontier(first.all_messages()))
    [ctx] = seen
    assert (ctx.run_id, ctx.tool, ctx.call_id, ctx.attempt) == ("ticket-2", "notify", "toolu_9", 1)
    assert ctx.idempotency_key.startswith("c4a-")


def test_a_run_level_once_only_replaces_the_agents(ledger: c4a.Ledger, outbox: Outbox) -> None:
    agent = email_agent(outbox)
    reads = OnceOnly(tools={"send_email": {"kind": "read"}})  # recorded nowhere: runs each time
    first = agent.run_sync("Tell Bob", conversation_id="t", capabilities=[reads])
    agent.run_sync(message_history=frontier(first.all_messages()), capabilities=[reads])
    assert outbox.sent() == ["bob@example.com"] * 2
    assert ledger.effects("t") == []


def test_once_only_can_be_given_for_one_run_only(ledger: c4a.Ledger, outbox: Outbox) -> None:
    agent: Agent[None, str] = Agent(
        scripted([("send_email", BOB, "c1")]), tools=[Tool(outbox.send, name="send_email")]
    )
    first = agent.run_sync("Tell Bob", conversation_id="t", capabilities=[OnceOnly()])
    agent.run_sync(message_history=frontier(first.all_messages()), capabilities=[OnceOnly()])
    assert outbox.sent() == ["bob@example.com"]


def test_two_once_only_on_one_agent_is_refused(ledger: c4a.Ledger, outbox: Outbox) -> None:
    with pytest.raises(UserError, match="more than one call4agents OnceOnly"):
        Agent(scripted([]), capabilities=[OnceOnly(), OnceOnly()])


def test_per_tool_options_are_checked_when_built() -> None:
    with pytest.raises(c4a.ConfigurationError, match="unknown option"):
        OnceOnly(tools={"send_email": {"kindd": "read"}})
    with pytest.raises(c4a.ConfigurationError, match="kind="):
        OnceOnly(tools={"send_email": {"kind": "sometimes"}})


def test_scope_call_runs_each_model_call_once(ledger: c4a.Ledger, outbox: Outbox) -> None:
    twice = [("send_email", BOB, "c1"), ("send_email", BOB, "c2")]
    agent = email_agent(outbox, *twice, tools={"send_email": {"scope": "call"}})
    first = agent.run_sync("Tell Bob twice", conversation_id="t")
    agent.run_sync(message_history=frontier(first.all_messages()))
    assert outbox.sent() == ["bob@example.com"] * 2  # two deliberate calls, each once


def test_identical_parallel_calls_are_one_action(ledger: c4a.Ledger, outbox: Outbox) -> None:
    agent = email_agent(outbox, ("send_email", BOB, "c1"), ("send_email", BOB, "c2"))
    done = agent.run_sync("Tell Bob", conversation_id="t")
    assert outbox.sent() == ["bob@example.com"]
    assert [r[1] for r in returns_in(done.all_messages())] == ["sent to bob@example.com"] * 2


def test_parallel_calls_each_run_once(ledger: c4a.Ledger, outbox: Outbox) -> None:
    calls = [("send_email", {**BOB, "to": f"user{i}@example.com"}, f"c{i}") for i in range(4)]
    agent = email_agent(outbox, *calls)
    first = agent.run_sync("Tell everyone", conversation_id="t")
    agent.run_sync(message_history=frontier(first.all_messages()))
    assert sorted(outbox.sent()) == [f"user{i}@example.com" for i in range(4)]


def test_a_function_toolset_goes_through_the_ledger(ledger: c4a.Ledger, outbox: Outbox) -> None:
    toolset = FunctionToolset([Tool(outbox.send, name="send_email")])
    agent: Agent[None, str] = Agent(
        scripted([("send_email", BOB, "c1")]), toolsets=[toolset], capabilities=[OnceOnly()]
    )
    first = agent.run_sync("Tell Bob", conversation_id="t")
    agent.run_sync(message_history=frontier(first.all_messages()))
    assert outbox.sent() == ["bob@example.com"]


def test_read_tools_run_straight_through(ledger: c4a.Ledger, outbox: Outbox) -> None:
    agent = email_agent(outbox, default=c4a.EffectOptions(kind="read"))
    first = agent.run_sync("Tell Bob", conversation_id="t")
    agent.run_sync(message_history=frontier(first.all_messages()))
    assert outbox.sent() == ["bob@example.com"] * 2
    assert ledger.effects("t") == []


def failing_agent(tool: Callable[..., str], **tool_options: Any) -> Agent[None, str]:
    return Agent(
        scripted([("charge", {"amount": 5}, "c1")]),
        tools=[Tool(tool, name="charge", **tool_options)],
        capabilities=[OnceOnly()],
    )


def test_a_failed_tool_ends_the_run_as_bare_and_may_run_again(ledger: c4a.Ledger) -> None:
    attempts: list[int] = []

    def charge(amount: int) -> str:
        attempts.append(c4a.current().attempt)
        if len(attempts) == 1:
            raise ConnectionRefusedError("card service refused the connection")
        return f"charged {amount}"

    agent = failing_agent(charge)
    with pytest.raises(ConnectionRefusedError, match="card service refused"):
        agent.run_sync("Charge me", conversation_id="t")
    [record] = ledger.effects("t")
    assert record.state == "failed"  # it did not act, so the same call may run again
    again = agent.run_sync("Charge me", conversation_id="t")
    assert returns_in(again.new_messages()) == [["charge", "charged 5", "success"]]
    assert attempts == [1, 2]


def test_a_timed_out_tool_is_in_doubt_and_not_retried(ledger: c4a.Ledger) -> None:
    runs: list[int] = []

    def charge(amount: int) -> str:
        runs.append(amount)
        time.sleep(1)  # longer than the tool's timeout: it may still act after the timeout
        return "charged"

    agent = failing_agent(charge, timeout=0.05)
    first = agent.run_sync("Charge me", conversation_id="t")
    [[_, message, outcome]] = returns_in(first.all_messages())
    assert outcome == "retried"  # Pydantic AI's own timeout result, spending one retry
    assert "Timed out" in message
    [doubt] = ledger.in_doubt()
    assert doubt.tool == "charge"
    again = agent.run_sync(message_history=frontier(first.all_messages()))
    [[_, message, outcome]] = returns_in(again.new_messages())
    assert (outcome, "NOT run again" in message) == ("retried", True)
    assert runs == [5]


def test_model_retry_from_a_tool_is_left_to_pydantic_ai(ledger: c4a.Ledger) -> None:
    def charge(amount: int) -> str:
        raise ModelRetry("amount must be in cents")

    agent = failing_agent(charge)
    first = agent.run_sync("Charge me", conversation_id="t")
    [[_, message, outcome]] = returns_in(first.all_messages())
    assert (outcome, "amount must be in cents" in message) == ("retried", True)
    [record] = ledger.effects("t")
    assert record.state == "failed"  # it did not act, so a corrected call may run


def test_arguments_without_a_stable_form_are_refused_before_running(ledger: c4a.Ledger) -> None:
    ran: list[float] = []

    def pay(amount: float) -> str:
        ran.append(amount)
        return "paid"

    agent: Agent[None, str] = Agent(
        scripted([("pay", {"amount": math.nan}, "c1")]), tools=[pay], capabilities=[OnceOnly()]
    )
    [[_, message, outcome]] = returns_in(agent.run_sync("Pay", conversation_id="t").all_messages())
    assert outcome == "retried"  # a tool error the model may correct, counted by retries=
    assert "refused by Call4Agents" in message
    assert ran == []


def test_a_tool_return_is_replayed_whole(ledger: c4a.Ledger) -> None:
    def book(room: str) -> ToolReturn[str]:
        return ToolReturn(return_value=f"booked {room}", metadata={"booking": 17})

    agent: Agent[None, str] = Agent(
        scripted([("book", {"room": "A"}, "c1")]), tools=[book], capabilities=[OnceOnly()]
    )
    first = agent.run_sync("Book", conversation_id="t")
    again = agent.run_sync(message_history=frontier(first.all_messages()))
    parts = [
        p for m in again.new_messages() for p in m.parts if getattr(p, "tool_name", "") == "book"
    ]
    [ret] = [p for p in parts if getattr(p, "part_kind", "") == "tool-return"]
    assert (ret.content, ret.metadata) == ("booked A", {"booking": 17})


WARN_CHILD = Path(__file__).with_name("warn_child.py")


@pytest.mark.slow  # a fresh interpreter that imports Pydantic AI
def test_only_a_fresh_conversation_id_is_warned_about_once(
    sqlite_target: Target, tmp_path: Path
) -> None:
    done = run_child(WARN_CHILD, str(tmp_path), env=child_env(sqlite_target.env()))
    assert done.returncode == 0, done.stderr
    counts = json.loads(done.stdout)
    assert counts["explicit"] == counts["resumed"] == []
    [message] = counts["fresh"]
    assert "conversation_id" in message
    assert "Pass a stable id" in message
    assert counts["fresh_again"] == []  # once per process
