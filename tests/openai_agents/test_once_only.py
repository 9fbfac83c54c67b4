"""OnceOnly on real Agents SDK agents, run by the SDK's Runner with its scripted test model."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from agents import (
    Agent,
    FunctionTool,
    RunContextWrapper,
    Runner,
    SQLiteSession,
    function_tool,
)
from agents.exceptions import UserError
from agents.tool_context import ToolContext

import call4agents as c4a
from call4agents_openai_agents import OnceOnly
from tests.openai_agents.support import Outbox, assistant_message, call, outputs, script


@pytest.fixture
def outbox(tmp_path: Path) -> Outbox:
    return Outbox(tmp_path / "outbox.jsonl")


def mailer(outbox: Outbox) -> FunctionTool:
    @function_tool
    def send_email(to: str, body: str) -> str:
        """Send an email."""
        n = outbox.send(to, key=c4a.current().idempotency_key)
        return f"message {n} sent to {to}"

    return send_email


def agent_with(tools: list[Any], *steps: Any) -> Agent[Any]:
    return Agent(name="support", model=script(*steps), tools=tools)


RUN = {"call4agents_run_id": "ticket-7"}


async def test_a_repeated_run_gets_the_recorded_result(ledger: c4a.Ledger, outbox: Outbox) -> None:
    once = OnceOnly()
    steps = [[call("send_email", "c1", to="bob", body="hi")], [assistant_message("done")]]
    first = await Runner.run(once.wrap(agent_with([mailer(outbox)], *steps)), "go", context=RUN)
    # A re-delivered job: the model asks again, with a fresh call id.
    steps[0] = [call("send_email", "c2", to="bob", body="hi")]
    again = await Runner.run(once.wrap(agent_with([mailer(outbox)], *steps)), "go", context=RUN)
    assert outbox.count() == 1
    assert outputs(first) == outputs(again) == ["message 1 sent to bob"]
    [record] = ledger.effects("ticket-7")
    assert (record.tool, record.state, record.args) == (
        "send_email",
        "succeeded",
        {"to": "bob", "body": "hi"},
    )
    assert outbox.lines()[0]["key"] == record.idempotency_key


def test_run_sync(ledger: c4a.Ledger, outbox: Outbox) -> None:
    once = OnceOnly()
    for call_id in ("c1", "c2"):
        agent = agent_with(
            [mailer(outbox)],
            [call("send_email", call_id, to="bob", body="hi")],
            [assistant_message("done")],
        )
        result = Runner.run_sync(once.wrap(agent), "go", context=RUN)
        assert outputs(result) == ["message 1 sent to bob"]
    assert outbox.count() == 1


async def test_run_streamed(ledger: c4a.Ledger, outbox: Outbox) -> None:
    once = OnceOnly()
    seen = []
    for call_id in ("c1", "c2"):
        agent = agent_with(
            [mailer(outbox)],
            [call("send_email", call_id, to="bob", body="hi")],
            [assistant_message("done")],
        )
        streamed = Runner.run_streamed(once.wrap(agent), "go", context=RUN)
        async for _ in streamed.stream_events():
            pass
        seen.append(outputs(streamed))
    assert seen == [["message 1 sent to bob"], ["message 1 sent to bob"]]
    assert outbox.count() == 1


async def test_parallel_calls_in_one_turn(ledger: c4a.Ledger, outbox: Outbox) -> None:
    agent = agent_with(
        [mailer(outbox)],
        [
            call("send_email", "c1", to="ann", body="hi"),
            call("send_email", "c2", to="bob", body="hi"),
            call("send_email", "c3", to="ann", body="hi"),  # the same call, in parallel
        ],
        [assistant_message("done")],
    )
    result = await Runner.run(OnceOnly().wrap(agent), "go", context=RUN)
    assert sorted(line["to"] for line in outbox.lines()) == ["ann", "bob"]
    first, second, third = outputs(result)
    assert first == third  # the identical parallel call got the one recorded result
    # The two sends run concurrently, so the outbox's message numbers may come in either order.
    assert first.endswith("sent to ann")
    assert second.endswith("sent to bob")


async def test_scope_call_keys_on_the_tool_call_id(ledger: c4a.Ledger, outbox: Outbox) -> None:
    once = OnceOnly(tools={"send_email": {"scope": "call"}})
    first = agent_with(
        [mailer(outbox)],
        [call("send_email", "c1", to="bob", body="hi")],
        [call("send_email", "c2", to="bob", body="hi")],  # a deliberate second email
        [assistant_message("done")],
    )
    result = await Runner.run(once.wrap(first), "go", context=RUN)
    assert outputs(result) == ["message 1 sent to bob", "message 2 sent to bob"]
    # A resumed copy of the run replays the first call, with its call id.
    replay = agent_with(
        [mailer(outbox)],
        [call("send_email", "c1", to="bob", body="hi")],
        [assistant_message("done")],
    )
    result = await Runner.run(once.wrap(replay), "go", context=RUN)
    assert outputs(result) == ["message 1 sent to bob"]
    assert outbox.count() == 2


async def test_a_failed_call_is_reported_and_may_run_again(ledger: c4a.Ledger) -> None:
    attempts: list[int] = []

    @function_tool
    async def charge(amount: int) -> str:
        """Charge a card."""
        attempts.append(amount)
        if len(attempts) == 1:
            raise ValueError("card declined")  # nothing was charged
        return f"charged {amount}"

    agent = agent_with(
        [charge],
        [call("charge", "c1", amount=5)],
        [call("charge", "c2", amount=5)],
        [assistant_message("done")],
    )
    result = await Runner.run(OnceOnly().wrap(agent), "go", context=RUN)
    # The model sees the SDK's own error text for the failure, then the real result.
    assert outputs(result) == [
        "An error occurred while running the tool. Please try again.",
        "charged 5",
    ]
    [record] = ledger.effects("ticket-7")
    assert (record.state, record.attempt) == ("succeeded", 2)


async def test_the_tools_own_failure_policy_still_applies(ledger: c4a.Ledger) -> None:
    def explain(ctx: RunContextWrapper[Any], error: Exception) -> str:
        return f"refund failed: {error}"

    @function_tool(failure_error_function=explain)
    def refund(order: str) -> str:
        """Refund an order."""
        raise LookupError(f"no order {order}")

    def agent() -> Agent[Any]:
        return agent_with([refund], [call("refund", "c1", order="A1")], [assistant_message("ok")])

    result = await Runner.run(OnceOnly().wrap(agent()), "go", context=RUN)
    plain = await Runner.run(agent(), "go", context=RUN)
    assert outputs(result) == outputs(plain) == ["refund failed: no order A1"]
    [record] = ledger.effects("ticket-7")
    assert record.state == "failed"
    assert "LookupError" in str(record.error)


async def test_an_ambiguous_error_is_in_doubt_and_never_rerun(ledger: c4a.Ledger) -> None:
    runs: list[str] = []

    @function_tool
    def wire(to: str) -> str:
        """Wire money."""
        runs.append(to)
        raise TimeoutError("the bank did not answer")

    agent = agent_with(
        [wire],
        [call("wire", "c1", to="bob")],
        [call("wire", "c2", to="bob")],
        [assistant_message("ok")],
    )
    result = await Runner.run(OnceOnly().wrap(agent), "go", context=RUN)
    assert runs == ["bob"]
    first, second = outputs(result)
    assert "may or may not have run" in first
    assert "may or may not have run" in second
    assert "Do not call it again" in second
    [doubt] = ledger.in_doubt()
    assert doubt.tool == "wire"


async def test_no_stable_run_id_fails_loudly_with_the_fix(
    ledger: c4a.Ledger, outbox: Outbox
) -> None:
    agent = agent_with(
        [mailer(outbox)], [call("send_email", "c1", to="bob", body="hi")], [assistant_message("")]
    )
    with pytest.raises(UserError) as caught:
        await Runner.run(OnceOnly().wrap(agent), "go")
    message = str(caught.value)
    assert "no stable id" in message
    assert "once.session(" in message
    assert "call4agents_run_id" in message
    assert outbox.count() == 0


class Job:
    call4agents_run_id = "job-attr"


@pytest.mark.parametrize(
    ("how", "expected"),
    [
        ("session", "session-9"),
        ("context-dict", "job-dict"),
        ("context-attribute", "job-attr"),
        ("c4a-run", "job-block"),
        ("explicit", "job-given"),
        ("explicit-callable", "job-from-context"),
    ],
)
async def test_where_the_run_id_comes_from(
    ledger: c4a.Ledger, outbox: Outbox, tmp_path: Path, how: str, expected: str
) -> None:
    run_id: Any = None
    if how == "explicit":
        run_id = "job-given"
    elif how == "explicit-callable":
        run_id = lambda ctx: f"job-from-{type(ctx.context).__name__.lower()}"  # noqa: E731
    once = OnceOnly(run_id=run_id)
    agent = once.wrap(
        agent_with(
            [mailer(outbox)],
            [call("send_email", "c1", to="bob", body="hi")],
            [assistant_message("done")],
        )
    )
    kwargs: dict[str, Any] = {}
    if how == "session":
        kwargs["session"] = once.session(SQLiteSession("session-9", str(tmp_path / "s.db")))
    elif how == "context-dict":
        kwargs["context"] = {"call4agents_run_id": "job-dict"}
    elif how == "context-attribute":
        kwargs["context"] = Job()
    elif how == "explicit-callable":
        kwargs["context"] = Context()
    if how == "c4a-run":
        with c4a.run("job-block"):
            await Runner.run(agent, "go", **kwargs)
    else:
        await Runner.run(agent, "go", **kwargs)
    assert [r.run_id for r in ledger.effects()] == [expected]


class Context:
    """A context with no run id of its own."""


async def test_a_session_run_and_its_next_turn_share_the_run(
    ledger: c4a.Ledger, outbox: Outbox, tmp_path: Path
) -> None:
    once = OnceOnly()
    session = once.session(SQLiteSession("ticket-8", str(tmp_path / "s.db")))
    for call_id in ("c1", "c2"):
        agent = agent_with(
            [mailer(outbox)],
            [call("send_email", call_id, to="bob", body="hi")],
            [assistant_message("done")],
        )
        await Runner.run(once.wrap(agent), "email bob", session=session)
    assert outbox.count() == 1
    history = await session.get_items()
    assert [i.get("role") for i in history if i.get("role")].count("user") == 2


async def test_read_tools_run_every_time(ledger: c4a.Ledger) -> None:
    looked: list[str] = []

    @function_tool
    def lookup(order: str) -> str:
        """Look an order up."""
        looked.append(order)
        return "shipped"

    agent = agent_with(
        [lookup],
        [call("lookup", "c1", order="A1")],
        [call("lookup", "c2", order="A1")],
        [assistant_message("done")],
    )
    once = OnceOnly(tools={"lookup": {"kind": "read"}})
    wrapped = once.wrap(agent)
    assert wrapped.tools[0] is agent.tools[0]  # nothing to record: the tool is left as it is
    await Runner.run(wrapped, "go", context=RUN)
    assert looked == ["A1", "A1"]
    assert ledger.effects() == []


async def test_handoff_agents_are_wrapped_too(ledger: c4a.Ledger, outbox: Outbox) -> None:
    billing = agent_with(
        [mailer(outbox)],
        [call("send_email", "c2", to="bob", body="refund")],
        [assistant_message("done")],
    )
    triage = Agent(
        name="triage",
        model=script([call("transfer_to_support", "h1")]),
        handoffs=[billing],
    )
    billing.handoffs = [triage]  # a cycle: each can hand back to the other
    tools = list(billing.tools)
    assert OnceOnly().wrap(triage) is triage  # the user's own agents, decorated in place
    result = await Runner.run(triage, "go", context=RUN)
    assert result.last_agent is billing
    assert outbox.count() == 1
    assert [r.tool for r in ledger.effects("ticket-7")] == ["send_email"]
    assert triage.handoffs == [billing]
    assert [t is u for t, u in zip(billing.tools, tools, strict=True)] == [True]


async def test_the_sdks_identity_checks_hold_as_bare(ledger: c4a.Ledger, outbox: Outbox) -> None:
    seen: list[bool] = []
    agents: list[Agent[Any]] = []

    for once in (None, OnceOnly()):

        @function_tool
        def send_email(ctx: ToolContext[Any], to: str, body: str) -> str:
            """Email a customer."""
            seen.append(ctx.agent is agents[-1])
            return f"message {outbox.send(to)} sent to {to}"

        agent = agent_with(
            [send_email], [call("send_email", "c1", to="bob", body="hi")], [assistant_message("ok")]
        )
        agents.append(agent)
        if once is not None:
            assert once.wrap(agent) is agent
            assert once.wrap(agent) is agent  # wrapping again changes nothing
        result = await Runner.run(agent, "go", context=dict(RUN))
        assert result.last_agent is agent
        assert agent.tools == [send_email]
        assert agent.tools[0] is send_email
    assert seen == [True, True]
    assert outbox.count() == 2  # bare, then once-only (the bare run recorded nothing)
    assert [r.tool for r in ledger.effects("ticket-7")] == ["send_email"]


async def test_agents_as_tools(ledger: c4a.Ledger, outbox: Outbox) -> None:
    once = OnceOnly()

    def outer() -> Agent[Any]:
        writer = agent_with(
            [mailer(outbox)],
            [call("send_email", "w1", to="bob", body="hi")],
            [assistant_message("the writer sent it")],
        )
        return Agent(
            name="lead",
            model=script([call("writer", "c1", input="email bob")], [assistant_message("ok")]),
            tools=[once.wrap(writer).as_tool("writer", "Writes and sends emails")],
        )

    first = await Runner.run(once.wrap(outer()), "go", context=RUN)
    again = await Runner.run(once.wrap(outer()), "go", context=RUN)
    assert outputs(first) == outputs(again) == ["the writer sent it"]
    assert outbox.count() == 1
    # The nested agent's tool belongs to the outer run; the agent-tool itself is not recorded.
    assert [(r.run_id, r.tool) for r in ledger.effects()] == [("ticket-7", "send_email")]


async def test_the_per_tool_form(ledger: c4a.Ledger, outbox: Outbox) -> None:
    once = OnceOnly()
    send_email = once.tool(mailer(outbox))
    assert once.tool(send_email) is send_email  # wrapping twice records once
    for call_id in ("c1", "c2"):
        agent = agent_with(
            [send_email],
            [call("send_email", call_id, to="bob", body="hi")],
            [assistant_message("")],
        )
        await Runner.run(agent, "go", context=RUN)
    assert outbox.count() == 1
    twice = once.wrap(once.wrap(agent))
    assert twice.tools[0] is send_email


async def test_per_tool_options_and_the_ledger_given(target: Any, outbox: Outbox) -> None:
    ledger = target.open()
    once = OnceOnly(
        ledger=ledger,
        tools={"send_email": c4a.EffectOptions(ignore=("body",))},
    )
    for call_id, body in (("c1", "hi"), ("c2", "hi again")):
        agent = agent_with(
            [mailer(outbox)],
            [call("send_email", call_id, to="bob", body=body)],
            [assistant_message("")],
        )
        await Runner.run(once.wrap(agent), "go", context=RUN)
    assert outbox.count() == 1  # the body is not part of the action's identity
    assert len(ledger.effects("ticket-7")) == 1


def test_bad_tool_options_fail_at_once() -> None:
    with pytest.raises(c4a.ConfigurationError, match="retry_in_dobut"):
        OnceOnly(tools={"send_email": {"retry_in_dobut": True}})
    with pytest.raises(c4a.ConfigurationError, match="EffectOptions or a dict"):
        OnceOnly(tools={"send_email": "read"})  # type: ignore[dict-item]


def test_misspelt_tool_options_warn(outbox: Outbox) -> None:
    agent = agent_with([mailer(outbox)])
    with pytest.warns(RuntimeWarning, match="send_emial"):
        OnceOnly(tools={"send_emial": {"kind": "read"}}).wrap(agent)


def test_the_wrapped_tool_keeps_what_the_model_sees(outbox: Outbox) -> None:
    original = mailer(outbox)
    before = dataclasses.replace(original)
    [wrapped] = OnceOnly().wrap(agent_with([original])).tools
    assert wrapped is original  # decorated in place
    for field in ("name", "description", "params_json_schema", "strict_json_schema"):
        assert getattr(wrapped, field) == getattr(before, field)
    assert wrapped.on_invoke_tool is not before.on_invoke_tool
    assert dataclasses.is_dataclass(wrapped)
