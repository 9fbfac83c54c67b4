"""Run controls on an MCP server: budgets, escalation, undo and read-before-write.

The server is a real MCPServer with OnceOnly, talked to by the SDK's in-memory client (and, where
the client's run must end, by a real Pydantic AI agent through its MCPToolset). What really
happened is a line in a file outside the ledger. Run ids are ``mcp:<identity>``.
"""

from __future__ import annotations

import json
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult, TextContent
from pydantic_ai import Agent
from pydantic_ai.mcp import MCPToolset
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from sqlalchemy import update

import call4agents as c4a
from call4agents.engine.undos import undo_for
from call4agents.facade.cli import main as cli_main
from call4agents.storage import run_rows
from call4agents.storage.tables import run_counters
from call4agents_mcp import KEY_META, OnceOnly, call_tool, ending_of, process_tool_call
from tests import forked
from tests.conftest import Target, run_child

CHILD = Path(__file__).with_name("run_controls_child.py")
Call = tuple[str, dict[str, Any], str]  # tool, arguments, idempotency key


class World:
    """The outside world: one line per thing that really happened."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def happen(self, line: str) -> None:
        with self.path.open("a", encoding="utf-8") as f:
            f.write(line + "\n")

    def lines(self) -> list[str]:
        return self.path.read_text().splitlines() if self.path.exists() else []


@pytest.fixture
def world(tmp_path: Path) -> World:
    return World(tmp_path / "world.txt")


def job(name: str) -> Callable[[Any], str]:
    """An identity naming the caller's run: its actions are in run ``mcp:<name>``."""
    return lambda ctx: name


def pay_server(world: World, once: OnceOnly) -> MCPServer:
    app = MCPServer("pay", middleware=[once])

    @app.tool()
    def charge(amount: int) -> dict[str, Any]:
        world.happen(f"charge {amount}")
        return {"charge_id": f"ch_{amount}", "amount": amount}

    @app.tool()
    def refund(amount: int) -> dict[str, Any]:
        world.happen(f"asked to refund {amount}")
        if amount > 100:
            c4a.escalate(
                "refunds over 100 need a person",
                what_remains=[f"refund {amount} once a person approves"],
                blocking_fact=f"the refund is {amount}",
            )
        world.happen(f"refund {amount}")
        return {"refund_id": f"re_{amount}"}

    return app


def call_all(app: MCPServer, *calls: Call) -> list[CallToolResult]:
    async def main() -> list[CallToolResult]:
        async with Client(app) as client:
            return [
                await client.call_tool(name, args, meta={KEY_META: key})
                for name, args, key in calls
            ]

    return anyio.run(main)


def charges(*amounts: int) -> list[Call]:
    return [("charge", {"amount": a}, f"charge-{a}") for a in amounts]


def outcome(result: CallToolResult) -> str:
    if result.is_error:
        return str(info(result)["outcome"])
    marker = (result.meta or {}).get("io.call4agents/outcome")
    return marker["outcome"] if marker else "ok"


def info(result: CallToolResult) -> dict[str, Any]:
    assert result.structured_content is None, result  # it would have to match the outputSchema
    found = (result.meta or {})["io.call4agents/outcome"]
    assert isinstance(found, dict)
    return found


def text(result: CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


# -- budgets --------------------------------------------------------------------------------------


def test_tool_call_limit_ends_the_run(target: Target, world: World) -> None:
    ledger = target.open()
    once = OnceOnly(ledger=ledger, identity=job("job-1"), budget=c4a.Budget(max_tool_calls=2))
    results = call_all(pay_server(world, once), *charges(1, 2, 1, 3, 3))
    # The repeat of 1 is served from the ledger and costs nothing; 3 is cut, and so is its retry.
    assert [outcome(r) for r in results] == [
        "ok",
        "ok",
        "replayed",
        "budget_exceeded",
        "budget_exceeded",
    ]
    assert world.lines() == ["charge 1", "charge 2"]
    cut = results[3]
    assert cut.is_error
    assert {k: info(cut)[k] for k in ("tool", "retryable", "ends_run", "reason", "detail")} == {
        "tool": "charge",
        "retryable": False,
        "ends_run": True,
        "reason": "step_limit",
        "detail": "2 tool calls",
    }
    assert info(cut)["run_id"] == "mcp:job-1"
    assert "hit its step limit" in text(cut)
    assert "do not call more tools" in text(cut)
    assert info(cut)["outcome"] == "budget_exceeded"
    assert cut.structured_content is None  # the tool's outputSchema describes its results only
    # The same details follow the text for clients that hand on only an error's content.
    block = cut.content[1]
    assert isinstance(block, TextContent)
    assert json.loads(block.text)["call4agents"] == {
        k: v for k, v in info(cut).items() if k != "message"
    }
    status = ledger.run_status("mcp:job-1")
    assert status is not None
    assert status.status == "step_limit"
    # The cut call is not recorded at all, least of all as the tool's result.
    assert [r.args["amount"] for r in ledger.effects("mcp:job-1")] == [1, 2]


def test_budget_is_counted_per_run(ledger: c4a.Ledger, world: World) -> None:
    budget = c4a.Budget(max_calls_per_tool=1)
    tenant_a = pay_server(world, OnceOnly(identity=job("tenant-a"), budget=budget))
    tenant_b = pay_server(world, OnceOnly(identity=job("tenant-b"), budget=budget))
    a_ok, a_cut = call_all(tenant_a, *charges(1, 2))
    [b_ok] = call_all(tenant_b, *charges(3))  # another caller's run has its own allowance
    assert [outcome(r) for r in (a_ok, a_cut, b_ok)] == ["ok", "budget_exceeded", "ok"]
    assert info(a_cut)["detail"] == "1 calls of charge"
    assert info(a_cut)["run_id"] == "mcp:tenant-a"
    assert world.lines() == ["charge 1", "charge 3"]


def test_the_deadline_ends_a_later_call_of_the_run(ledger: c4a.Ledger, world: World) -> None:
    app = pay_server(world, OnceOnly(identity=job("job-d"), budget=c4a.Budget(deadline=3600)))
    [first] = call_all(app, *charges(1))
    assert outcome(first) == "ok"
    # An hour passes (moved in the ledger rather than waited for); the caller comes back.
    with ledger.engine.begin() as conn:
        conn.execute(
            update(run_counters)
            .where(run_counters.c.run_id == "mcp:job-d", run_counters.c.name == "started_at")
            .values(value=run_counters.c.value - 3601)
        )
    [late] = call_all(app, *charges(2))
    assert outcome(late) == "budget_exceeded"
    assert (info(late)["reason"], info(late)["ends_run"]) == ("deadline", True)
    assert world.lines() == ["charge 1"]
    status = ledger.run_status("mcp:job-d")
    assert status is not None
    assert status.status == "deadline"


def test_effects_inside_a_tool_count_against_its_run(ledger: c4a.Ledger, world: World) -> None:
    @c4a.effect(name="refund_order")
    def refund_order(order: str) -> str:
        world.happen(f"refund {order}")
        return f"re_{order}"

    app = MCPServer(
        "shop",
        middleware=[OnceOnly(identity=job("job-n"), budget=c4a.Budget(max_tool_calls=3))],
    )

    @app.tool()
    def refund_all(orders: list[str]) -> list[str]:
        return [refund_order(o) for o in orders]  # each is an action of run mcp:job-n

    [cut] = call_all(app, ("refund_all", {"orders": ["o1", "o2", "o3"]}, "all"))
    # refund_all itself is the first of three calls, so the third refund is cut inside it.
    assert world.lines() == ["refund o1", "refund o2"]
    assert outcome(cut) == "budget_exceeded"
    assert info(cut)["tool"] == "refund_all"
    assert info(cut)["ends_run"] is True
    states = {r.tool: r.state for r in ledger.effects("mcp:job-n")}
    assert states == {"refund_all": "failed", "refund_order": "succeeded"}


def test_a_tool_can_tell_the_model_to_wrap_up(ledger: c4a.Ledger) -> None:
    app = MCPServer(
        "steps",
        middleware=[OnceOnly(identity=job("job-w"), budget=c4a.Budget(max_tool_calls=5, soft=0.8))],
    )

    @app.tool()
    def step(n: int) -> dict[str, Any]:
        usage = c4a.budget_usage()  # the call's run, with the server's budget
        return {"done": n, "spent": usage.tool_calls, "note": usage.wrap_up_note()}

    results = call_all(app, *[("step", {"n": n}, f"s{n}") for n in range(1, 5)])
    answers = [r.structured_content or {} for r in results]
    assert [a["spent"] for a in answers] == [1, 2, 3, 4]
    assert [a["note"] is not None for a in answers] == [False, False, False, True]  # 80%


def test_client_helper_raises_the_ending(ledger: c4a.Ledger, world: World) -> None:
    once = OnceOnly(identity=job("job-c"), budget=c4a.Budget(max_tool_calls=1))
    app = pay_server(world, once)

    async def main() -> CallToolResult:
        async with Client(app) as client, c4a.run("agent-run"):
            await call_tool(client, "charge", {"amount": 1})
            with pytest.raises(c4a.BudgetExceeded) as caught:
                await call_tool(client, "charge", {"amount": 2})
            assert caught.value.reason == "step_limit"
            assert caught.value.run_id == "mcp:job-c"
            assert caught.value.tool == "charge"
            return await call_tool(client, "charge", {"amount": 2}, raise_on_end=False)

    result = anyio.run(main)
    assert result.is_error
    assert isinstance(ending_of(result), c4a.BudgetExceeded)
    assert world.lines() == ["charge 1"]


def scripted_charges(amounts: list[int], seen: list[int]) -> FunctionModel:
    """A model that asks for one charge per request, then says it is done."""

    def respond(messages: list[ModelMessage], agent: AgentInfo) -> ModelResponse:
        seen.append(len(messages))
        n = sum(1 for m in messages if m.kind == "response")
        if n < len(amounts):
            return ModelResponse(parts=[ToolCallPart("charge", {"amount": amounts[n]})])
        return ModelResponse(parts=[TextPart("done")])

    return FunctionModel(respond)


def test_pydantic_ai_agent_run_ends_with_budget_exceeded(ledger: c4a.Ledger, world: World) -> None:
    once = OnceOnly(identity=job("job-p"), budget=c4a.Budget(max_tool_calls=2))
    toolset = MCPToolset(pay_server(world, once), process_tool_call=process_tool_call())
    requests: list[int] = []
    agent = Agent(scripted_charges([1, 2, 3, 4], requests), toolsets=[toolset])
    with pytest.raises(c4a.BudgetExceeded) as caught:
        agent.run_sync("Charge them all", conversation_id="conv-p")
    assert caught.value.reason == "step_limit"
    assert world.lines() == ["charge 1", "charge 2"]
    assert len(requests) == 3  # the cut never went back to the model as a tool error


def run_budget_child(
    target: Target, world: Path, amounts: str, *point: str
) -> subprocess.CompletedProcess[str]:
    env = dict(target.env(), MAX_CALLS="3", AMOUNTS=amounts)
    return run_child(CHILD, "job-crash", str(world), *point, env=env)


def test_budget_survives_a_server_crash_and_restart(target: Target, tmp_path: Path) -> None:
    out = tmp_path / "world.txt"
    killed = run_budget_child(target, out, "1,2,3,4", "kill_after_2")
    assert killed.returncode == -signal.SIGKILL
    restarted = run_budget_child(target, out, "1,2,3,4")
    assert restarted.returncode == 0, restarted.stderr
    assert json.loads(restarted.stdout) == [
        "replayed",
        "replayed",
        "ok",
        "budget_exceeded:step_limit",
    ]
    assert out.read_text().splitlines() == ["charge 1", "charge 2", "charge 3"]


def test_two_replicas_share_one_budget(target: Target, tmp_path: Path) -> None:
    out = tmp_path / "world.txt"
    env = target.env()
    runs = [
        (["job-replicas", str(out)], dict(env, MAX_CALLS="4", AMOUNTS=n))
        for n in ("1,2,3,4,5", "6,7,8,9,10")
    ]
    workers = forked.run_together(CHILD, runs, timeout=120)
    assert [w.returncode for w in workers] == [0, 0], [w.stderr for w in workers]
    outcomes: list[str] = [outcome for w in workers for outcome in json.loads(w.stdout)]
    assert outcomes.count("ok") == 4  # not 4 each
    assert outcomes.count("budget_exceeded:step_limit") == 6
    assert len(out.read_text().splitlines()) == 4


def test_budget_must_be_a_budget() -> None:
    with pytest.raises(c4a.ConfigurationError, match=r"takes a c4a\.Budget"):
        OnceOnly(budget={"max_tool_calls": 3})  # type: ignore[arg-type]


# -- escalation -----------------------------------------------------------------------------------


def test_escalation_inside_a_tool_ends_the_run(
    target: Target, world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    ledger = target.open()
    app = pay_server(world, OnceOnly(ledger=ledger, identity=job("job-esc")))
    done, escalated, again = call_all(
        app,
        ("charge", {"amount": 30}, "c-30"),
        ("refund", {"amount": 500}, "r-500"),
        ("refund", {"amount": 500}, "r-500"),  # the client retries: the tool must not run again
    )
    assert outcome(done) == "ok"
    assert world.lines() == ["charge 30", "asked to refund 500"]
    for result in (escalated, again):
        assert result.is_error
        assert info(result)["outcome"] == "escalated"
        assert info(result)["ends_run"] is True
        assert info(result)["retryable"] is False
        assert info(result)["reason"] == "refunds over 100 need a person"
        assert "do not call more tools" in text(result)
    handoff = info(escalated)["handoff"]
    assert handoff["run_id"] == "mcp:job-esc"
    assert handoff["status"] == "escalated"
    assert handoff["blocking_fact"] == "the refund is 500"
    assert handoff["what_remains"] == ["refund 500 once a person approves"]
    assert [(d["tool"], d["args"], d["result"], d["external_ids"]) for d in handoff["done"]] == [
        ("charge", {"amount": 30}, {"charge_id": "ch_30", "amount": 30}, {"charge_id": "ch_30"})
    ]
    assert [(f["tool"], f["args"]) for f in handoff["failed"]] == [("refund", {"amount": 500})]
    assert handoff["in_doubt"] == []
    assert info(again)["handoff"]["done"] == handoff["done"]
    status = ledger.run_status("mcp:job-esc")
    assert status is not None
    assert status.status == "escalated"
    states = [(r.tool, r.state) for r in ledger.effects("mcp:job-esc")]
    assert states == [("charge", "succeeded"), ("refund", "failed")]  # never a result

    schema = ["--schema", target.schema] if target.schema else []
    argv = ["show", "mcp:job-esc", "--handoff", "--json", "--url", target.url, *schema]
    capsys.readouterr()
    assert cli_main(argv) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["reason"] == "refunds over 100 need a person"
    assert [d["tool"] for d in shown["done"]] == ["charge"]
    assert [f["tool"] for f in shown["failed"]] == ["refund"]


def test_client_helper_raises_escalated_with_the_handoff(ledger: c4a.Ledger, world: World) -> None:
    app = pay_server(world, OnceOnly(identity=job("job-h")))

    async def main() -> c4a.Escalated:
        async with Client(app) as client, c4a.run("agent-run"):
            await call_tool(client, "charge", {"amount": 7})
            with pytest.raises(c4a.Escalated) as caught:
                await call_tool(client, "refund", {"amount": 700})
            return caught.value

    escalated = anyio.run(main)
    assert escalated.run_id == "mcp:job-h"
    assert escalated.handoff.reason == "refunds over 100 need a person"
    assert [d["external_ids"] for d in escalated.handoff.done] == [{"charge_id": "ch_7"}]
    assert [f["tool"] for f in escalated.handoff.failed] == ["refund"]


def test_pydantic_ai_agent_run_ends_with_escalated(ledger: c4a.Ledger, world: World) -> None:
    app = pay_server(world, OnceOnly(identity=job("job-pe")))
    requests: list[int] = []

    def respond(messages: list[ModelMessage], agent: AgentInfo) -> ModelResponse:
        requests.append(len(messages))
        return ModelResponse(parts=[ToolCallPart("refund", {"amount": 900})])

    toolset = MCPToolset(app, process_tool_call=process_tool_call())
    agent = Agent(FunctionModel(respond), toolsets=[toolset])
    with pytest.raises(c4a.Escalated) as caught:
        agent.run_sync("Refund the order", conversation_id="conv-pe")
    assert caught.value.handoff.blocking_fact == "the refund is 900"
    assert len(requests) == 1
    assert world.lines() == ["asked to refund 900"]


def flaky_booking(world: World, once: OnceOnly) -> MCPServer:
    app = MCPServer("travel", middleware=[once])

    @app.tool()
    def book(seat: str) -> str:
        world.happen(f"book {seat}")
        raise TimeoutError("no answer from the airline")

    return app


def test_escalate_on_in_doubt(ledger: c4a.Ledger, world: World) -> None:
    once = OnceOnly(identity=job("job-d"), escalate_on=("in_doubt",))
    first, again = call_all(
        flaky_booking(world, once), *[("book", {"seat": "12A"}, "b-1") for _ in "12"]
    )
    assert world.lines() == ["book 12A"]  # in doubt: never run blindly again
    for result in (first, again):
        assert info(result)["outcome"] == "escalated"
        assert info(result)["reason"] == "book may or may not have happened"
    handoff = info(first)["handoff"]
    assert [(d["tool"], d["why"]) for d in handoff["in_doubt"]] == [
        ("book", "TimeoutError: no answer from the airline")
    ]
    assert "call4agents resolve" in handoff["what_remains"][0]


def test_escalate_on_denied(ledger: c4a.Ledger, world: World) -> None:
    once = OnceOnly(
        identity=job("job-a"), tools={"charge": {"approval": True}}, escalate_on=("denied",)
    )
    app = pay_server(world, once)
    [asked] = call_all(app, ("charge", {"amount": 5000}, "big"))
    assert info(asked)["outcome"] == "approval_required"
    ledger.deny(info(asked)["approval"]["ticket"], by="ann@example.com", reason="too large")
    [denied] = call_all(app, ("charge", {"amount": 5000}, "big"))
    assert info(denied)["outcome"] == "escalated"
    assert info(denied)["reason"] == "a person denied charge"
    assert info(denied)["handoff"]["blocking_fact"] == "denied by ann@example.com: too large"
    assert world.lines() == []


def test_escalate_on_per_tool(ledger: c4a.Ledger, world: World) -> None:
    # The policy can also be one tool's own (EffectOptions.escalate_on); other tools answer
    # the client with an ordinary error.
    once = OnceOnly(
        identity=job("job-t"),
        tools={"charge": {"approval": True, "escalate_on": ["denied"]}},
    )
    app = pay_server(world, once)
    [asked] = call_all(app, ("charge", {"amount": 70}, "c-1"))
    ledger.deny(info(asked)["approval"]["ticket"], by="ann@example.com", reason="no")
    [denied] = call_all(app, ("charge", {"amount": 70}, "c-1"))
    assert info(denied)["outcome"] == "escalated"
    assert info(denied)["reason"] == "a person denied charge"
    assert world.lines() == []


def test_escalate_on_budget(ledger: c4a.Ledger, world: World) -> None:
    once = OnceOnly(
        identity=job("job-b"), budget=c4a.Budget(max_tool_calls=1), escalate_on=["budget"]
    )
    ok, cut = call_all(pay_server(world, once), *charges(1, 2))
    assert outcome(ok) == "ok"
    assert info(cut)["outcome"] == "escalated"
    assert info(cut)["reason"] == "the run hit its step limit"
    assert info(cut)["handoff"]["blocking_fact"] == "1 tool calls"
    assert [d["tool"] for d in info(cut)["handoff"]["done"]] == ["charge"]
    status = ledger.run_status("mcp:job-b")
    assert status is not None
    assert status.status == "escalated"


def test_escalate_on_refuses_unknown_outcomes() -> None:
    with pytest.raises(
        c4a.ConfigurationError,
        match=r"escalate_on=\['failed'\] is not understood \(in OnceOnly\)",
    ):
        OnceOnly(escalate_on=("failed",))


# -- undo -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("given", ["dict", "EffectOptions"])
def test_undo_a_run_made_through_the_server(ledger: c4a.Ledger, world: World, given: str) -> None:
    refunds: list[tuple[Any, int]] = []

    def refund(result: Any, *, amount: int) -> dict[str, str]:
        refunds.append((result, amount))  # the tool's own value, not the whole CallToolResult
        world.happen(f"refund {amount}")
        return {"refund_id": f"re_{amount}", "key": c4a.current().idempotency_key}

    options: Any = {"undo": refund} if given == "dict" else c4a.EffectOptions(undo=refund)
    once = OnceOnly(identity=job(f"job-u-{given}"), tools={"charge": options})
    call_all(pay_server(world, once), *charges(1, 2))
    report = ledger.undo(f"mcp:job-u-{given}")
    assert report.status == "undone"
    assert refunds == [
        ({"charge_id": "ch_2", "amount": 2}, 2),
        ({"charge_id": "ch_1", "amount": 1}, 1),
    ]  # newest first
    assert ledger.undo(f"mcp:job-u-{given}").status == "undone"  # and never twice
    assert world.lines() == ["charge 1", "charge 2", "refund 2", "refund 1"]


def test_undo_is_registered_when_the_server_is_built() -> None:
    # A process that only undoes (`call4agents undo RUN --import myserver`) never serves a call.
    OnceOnly(tools={"cancel_booking_c4a_test": {"undo": lambda result, **args: result}})
    undo = undo_for("cancel_booking_c4a_test")
    assert undo is not None
    recorded = {
        "content": [{"type": "text", "text": "PNR-7"}],
        "structuredContent": {"result": "PNR-7"},
        "isError": False,
    }
    assert undo(recorded, seat="1A") == "PNR-7"


# -- read-before-write ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "first_outcome"),
    [(ValueError, "failed"), (TimeoutError, "in_doubt")],
)
def test_find_existing_records_the_found_ticket(
    target: Target, error: type[Exception], first_outcome: str
) -> None:
    ledger = target.open()
    tracker: list[dict[str, Any]] = []  # an issue tracker without idempotency keys

    def find_ticket(title: str) -> dict[str, Any] | None:
        return c4a.find_marked(tracker, lambda t: t["title"])

    app = MCPServer(
        "tracker",
        middleware=[
            OnceOnly(
                ledger=ledger,
                identity=job("job-t"),
                tools={"open_ticket": {"find_existing": find_ticket}},
            )
        ],
    )

    @app.tool()
    def open_ticket(title: str) -> dict[str, Any]:
        ticket = {"id": len(tracker) + 1, "title": f"{title} {c4a.key_marker()}"}
        tracker.append(ticket)
        if len(tracker) == 1:
            raise error("the tracker's answer was lost")  # created, but we could not tell
        return ticket

    first, found, again = call_all(app, *[("open_ticket", {"title": "Printer"}, "t-1")] * 3)
    assert outcome(first) == first_outcome
    assert len(tracker) == 1  # found, not created a second time
    assert outcome(found) == "found_existing"
    assert not found.is_error
    assert found.structured_content == tracker[0]
    assert outcome(again) == "replayed"
    assert again.structured_content == tracker[0]
    [record] = ledger.effects("mcp:job-t")
    assert record.state == "succeeded"
    assert record.result["structuredContent"] == tracker[0]


# -- the run's trigger ----------------------------------------------------------------------------


def shown_run(target: Target, run_id: str, capsys: pytest.CaptureFixture[str]) -> Any:
    schema = ["--schema", target.schema] if target.schema else []
    capsys.readouterr()
    assert cli_main(["show", run_id, "--json", "--url", target.url, *schema]) == 0
    return json.loads(capsys.readouterr().out)["run"]


def test_trigger_is_recorded_as_the_server_enters_a_run(
    target: Target, world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    ledger = target.open()
    once = OnceOnly(ledger=ledger, identity=job("job-t"), trigger="webhook")
    results = call_all(pay_server(world, once), *charges(1, 2, 1))
    assert [outcome(r) for r in results] == ["ok", "ok", "replayed"]
    # Entered once by this server, whatever the number of calls: one trigger.
    assert shown_run(target, "mcp:job-t", capsys)["triggers"] == ["webhook"]

    # A call the ledger does not record (a read) enters its run too.
    reads = OnceOnly(
        ledger=ledger,
        identity=job("job-r"),
        trigger="schedule",
        default=c4a.EffectOptions(kind="read"),
    )
    call_all(pay_server(world, reads), ("charge", {"amount": 9}, "charge-9"))
    assert run_rows.triggers(ledger.store, "mcp:job-r") == ["schedule"]
    assert ledger.effects("mcp:job-r") == []  # nothing recorded but the entry

    # A restarted server (a new OnceOnly, same ledger) enters a run that has acted: a retry.
    again = OnceOnly(ledger=ledger, identity=job("job-t"), trigger="webhook")
    assert [outcome(r) for r in call_all(pay_server(world, again), *charges(3))] == ["ok"]
    assert shown_run(target, "mcp:job-t", capsys)["triggers"] == ["webhook", "retry"]
    assert world.lines() == ["charge 1", "charge 2", "charge 9", "charge 3"]


def test_a_bad_trigger_is_refused_when_the_server_is_built() -> None:
    with pytest.raises(c4a.ConfigurationError) as raised:
        OnceOnly(trigger="cron")  # type: ignore[arg-type]
    message = str(raised.value)
    assert "OnceOnly(trigger='cron') is not a known trigger" in message
    assert "'user', 'schedule', 'webhook'" in message
