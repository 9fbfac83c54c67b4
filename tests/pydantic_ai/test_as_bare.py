"""A tool's own errors, retries, usage limits and cancellation: the same run bare and with OnceOnly.

Each test drives one real Agent with a FunctionModel twice, bare and with ``OnceOnly()``, and
compares how the run ended (its output, or the exception Pydantic AI raised). Where once-only has
something to say (an in-doubt call is not run again) the test says so beside the comparison.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import pytest
from pydantic_ai import Agent, ModelRetry, Tool, UsageLimits
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.exceptions import UnexpectedModelBehavior, UsageLimitExceeded
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

import call4agents as c4a
from call4agents_pydantic_ai import OnceOnly
from tests.conftest import Target

Ending = tuple[str, str, str]  # ("output" | "raised", type name, text)


@pytest.fixture
def ledger(sqlite_target: Target) -> c4a.Ledger:
    return c4a.init(sqlite_target.open(lease=5.0, wait=5.0))


def calling(args: Callable[[int], dict[str, Any]]) -> FunctionModel:
    """A model that calls ``t`` on every turn (with ``args(turn)``) and never stops by itself,
    except that it answers with text once a tool returned."""

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        last = messages[-1].parts[-1]
        if last.part_kind == "tool-return" and getattr(last, "outcome", "success") == "success":
            return ModelResponse(parts=[TextPart(f"done: {last.content}")])
        turn = sum(isinstance(m, ModelResponse) for m in messages)
        return ModelResponse(parts=[ToolCallPart("t", args(turn), tool_call_id=f"c{turn}")])

    return FunctionModel(respond)


def same_args(turn: int) -> dict[str, Any]:
    return {"n": 1}


def ending(
    tool: Tool[None],
    capabilities: list[AbstractCapability[Any]],
    *,
    args: Callable[[int], dict[str, Any]] = same_args,
    limits: UsageLimits | None = None,
) -> Ending:
    agent: Agent[None, str] = Agent(calling(args), tools=[tool], capabilities=capabilities)
    try:
        result = agent.run_sync("go", conversation_id="conv-1", usage_limits=limits)
    except Exception as exc:
        return ("raised", type(exc).__name__, str(exc))
    return ("output", type(result.output).__name__, result.output)


def bare_and_on(tool: Tool[None], **kwargs: Any) -> tuple[Ending, Ending]:
    return ending(tool, [], **kwargs), ending(tool, [OnceOnly()], **kwargs)


@pytest.mark.parametrize("error", [RuntimeError("card service down"), TypeError("bad amount")])
def test_a_tool_error_ends_the_run_as_bare_after_the_ledger_recorded_it(
    ledger: c4a.Ledger, error: Exception
) -> None:
    def t(n: int) -> str:
        raise error

    bare, on = bare_and_on(Tool(t))
    assert bare == on == ("raised", type(error).__name__, str(error))
    [record] = ledger.effects("conv-1")
    assert (record.tool, record.state) == ("t", "failed")


def test_the_exception_raised_is_the_tools_own_object(ledger: c4a.Ledger) -> None:
    error = RuntimeError("card service down")

    def t(n: int) -> str:
        raise error

    agent: Agent[None, str] = Agent(calling(same_args), tools=[t], capabilities=[OnceOnly()])
    with pytest.raises(RuntimeError) as raised:
        agent.run_sync("go", conversation_id="conv-1")
    assert raised.value is error


def test_an_unserialisable_return_value_reaches_pydantic_ai_as_bare(ledger: c4a.Ledger) -> None:
    class Receipt:  # not JSON: the ledger cannot store it
        def __str__(self) -> str:
            return "receipt 7"

    def t(n: int) -> Any:
        return Receipt()

    bare, on = bare_and_on(Tool(t))
    assert bare == on
    [record] = ledger.effects("conv-1")
    assert record.state == "succeeded"  # it acted; only its result is not kept


def test_model_retry_past_the_tools_retries_ends_the_run_as_bare(ledger: c4a.Ledger) -> None:
    def t(n: int) -> str:
        raise ModelRetry("try another n")

    bare, on = bare_and_on(Tool(t, max_retries=2), args=lambda turn: {"n": turn})
    assert bare == on
    assert on[:2] == ("raised", UnexpectedModelBehavior.__name__)
    assert "exceeded max retries count of 2" in on[2]


def test_a_timed_out_tool_spends_its_retries_as_bare_and_is_not_run_again(
    ledger: c4a.Ledger,
) -> None:
    release = threading.Event()
    started: list[int] = []

    def t(n: int) -> str:
        started.append(n)
        release.wait(30)  # still running when Pydantic AI's timeout fires: it may yet act
        return "charged"

    try:
        bare, on = bare_and_on(Tool(t, timeout=0.05, max_retries=1))
    finally:
        release.set()
    assert bare == on
    assert on[:2] == ("raised", UnexpectedModelBehavior.__name__)
    # Bare ran it twice (once per try); with OnceOnly the second call met the doubt instead.
    assert started == [1, 1, 1]
    [doubt] = ledger.in_doubt()
    assert doubt.tool == "t"


def test_usage_limits_end_the_run_as_bare(ledger: c4a.Ledger) -> None:
    def t(n: int) -> str:
        raise ModelRetry(f"{n} is not it")

    limits = UsageLimits(request_limit=3)
    bare, on = bare_and_on(Tool(t, max_retries=10), args=lambda turn: {"n": turn}, limits=limits)
    assert bare == on
    assert on[:2] == ("raised", UsageLimitExceeded.__name__)


def test_a_cancelled_run_is_cancelled_as_bare_and_its_call_is_in_doubt(ledger: c4a.Ledger) -> None:
    async def cancelled(capabilities: list[AbstractCapability[Any]]) -> str:
        entered = asyncio.Event()

        async def t(n: int) -> str:
            entered.set()
            await asyncio.Event().wait()  # never set: the run is cancelled here
            return "charged"

        agent: Agent[None, str] = Agent(calling(same_args), tools=[t], capabilities=capabilities)
        run = asyncio.ensure_future(agent.run("go", conversation_id="conv-1"))
        await entered.wait()
        run.cancel()
        try:
            await run
        except asyncio.CancelledError:
            return "cancelled"
        return "finished"

    assert asyncio.run(cancelled([])) == asyncio.run(cancelled([OnceOnly()])) == "cancelled"
    [doubt] = ledger.in_doubt()  # it may have acted before the cancellation reached it
    assert doubt.tool == "t"
