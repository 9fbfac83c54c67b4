"""Run controls on real create_agent graphs: budgets, escalation, undo and read-before-write.

The model is StepModel (one tool call per turn, usage figures on each reply, every request it
was sent kept). Emails and tickets are counted outside the ledger.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import ToolErrorMiddleware
from langchain_core.messages import HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import Command
from sqlalchemy import update

import call4agents as c4a
from call4agents.facade.cli import main as cli_main
from call4agents.storage.tables import run_counters
from call4agents_langgraph import OnceOnly
from tests.conftest import Target
from tests.langgraph.fake_model import StepModel
from tests.langgraph.helpers import Backend, Outbox, child

BODY = "Your refund is on its way"
PEOPLE = ["ann@x", "bob@x", "cy@x", "dee@x"]


def config(thread: str = "thread-1") -> Any:
    return {"configurable": {"thread_id": thread}}


def emails(*people: str) -> list[tuple[str, dict[str, Any]]]:
    return [("send_email", {"to": to, "body": BODY}) for to in people]


def emailer(outbox: Outbox) -> Any:
    @tool
    def send_email(to: str, body: str) -> dict[str, str]:
        """Email a customer."""
        outbox.send(to, body)
        return {"message_id": f"msg-{to}", "to": to}

    return send_email


def agent(model: StepModel, tools: list[Any], once: OnceOnly, **kwargs: Any) -> Any:
    return create_agent(model, tools, middleware=[once], checkpointer=InMemorySaver(), **kwargs)


def sent(outbox: Outbox) -> list[str]:
    return [line["to"] for line in outbox.lines()]


def shown_to_model(model: StepModel) -> str:
    """Everything the model was sent, as one text, to check what never reached it."""
    return "\n".join(str(m.content) for request in model.seen for m in request)


def usage(ledger: c4a.Ledger, run_id: str) -> c4a.BudgetUsage:
    with c4a.run(run_id, ledger=ledger, budget=c4a.Budget(max_tool_calls=1000)):
        return c4a.budget_usage(ledger=ledger)


# -- budgets -------------------------------------------------------------------------------------


def test_tool_call_limit_ends_the_run(target: Target, outbox: Outbox) -> None:
    ledger = target.open()
    model = StepModel(calls=emails(*PEOPLE))
    once = OnceOnly(ledger=ledger, budget=c4a.Budget(max_tool_calls=2))
    graph = agent(model, [emailer(outbox)], once)
    with pytest.raises(c4a.BudgetExceeded) as caught:
        graph.invoke({"messages": [HumanMessage("mail them")]}, config())
    assert (caught.value.reason, caught.value.detail) == ("step_limit", "2 tool calls")
    assert caught.value.run_id == "thread-1"
    assert sent(outbox) == ["ann@x", "bob@x"]
    assert [r.args["to"] for r in ledger.effects("thread-1")] == ["ann@x", "bob@x"]
    status = ledger.run_status("thread-1")
    assert status is not None
    assert status.status == "step_limit"
    assert "step limit" not in shown_to_model(model)  # an ending, not a tool error to work around
    # The run stays ended: a resume meets the same count, not a fresh one.
    with pytest.raises(c4a.BudgetExceeded):
        graph.invoke(None, config())
    assert len(outbox) == 2


def test_model_request_limit_ends_the_run(target: Target, outbox: Outbox) -> None:
    ledger = target.open()
    model = StepModel(calls=emails(*PEOPLE))
    once = OnceOnly(ledger=ledger, budget=c4a.Budget(max_model_requests=2))
    graph = agent(model, [emailer(outbox)], once)
    with pytest.raises(c4a.BudgetExceeded) as caught:
        graph.invoke({"messages": [HumanMessage("mail them")]}, config())
    assert (caught.value.reason, caught.value.detail) == ("step_limit", "2 model requests")
    assert len(model.seen) == 2  # the third request was never made
    assert sent(outbox) == ["ann@x", "bob@x"]
    assert usage(ledger, "thread-1").model_requests == 2


def test_cost_ceiling_is_fed_by_the_models_usage(target: Target, outbox: Outbox) -> None:
    ledger = target.open()
    # 1000 tokens in at 3.0 and 500 out at 15.0 per million: 0.0105 a request.
    model = StepModel(calls=emails(*PEOPLE), usage=(1000, 500))
    budget = c4a.Budget(max_cost=0.02, token_prices=(3.0, 15.0))
    graph = agent(model, [emailer(outbox)], OnceOnly(ledger=ledger, budget=budget))
    with pytest.raises(c4a.BudgetExceeded) as caught:
        graph.invoke({"messages": [HumanMessage("mail them")]}, config())
    assert caught.value.reason == "budget"
    assert "spent 0.021 of 0.02" in caught.value.detail
    spent = usage(ledger, "thread-1")
    assert (spent.input_tokens, spent.output_tokens) == (2000, 1000)
    assert spent.cost == pytest.approx(0.021)
    assert len(model.seen) == 2
    # The second reply crossed the ceiling, so the tool call it asked for is refused too.
    assert caught.value.tool == "send_email"
    assert sent(outbox) == ["ann@x"]
    status = ledger.run_status("thread-1")
    assert status is not None
    assert status.status == "budget"


def test_soft_threshold_tells_the_model_to_wrap_up(target: Target, outbox: Outbox) -> None:
    model = StepModel(calls=emails(*PEOPLE))
    budget = c4a.Budget(max_model_requests=10, soft=0.3)
    graph = agent(
        model,
        [emailer(outbox)],
        OnceOnly(ledger=target.open(), budget=budget),
        system_prompt="You answer customers.",
    )
    out = graph.invoke({"messages": [HumanMessage("mail them")]}, config())
    texts = model.system_texts()
    assert len(texts) == 5
    assert texts[:2] == ["You answer customers."] * 2  # 1 and 2 of 10 requests: below 30%
    for text, share in zip(texts[2:], ("30%", "40%", "50%"), strict=True):
        assert text.startswith("You answer customers.\n\nNote from the run's budget:")
        assert f"{share} of a limit is spent" in text
        assert "do not start new work" in text
    # Shown on the request only: the thread's saved messages do not carry it.
    assert not any(isinstance(m, SystemMessage) for m in out["messages"])


def test_async_agent_counts_and_notes(target: Target, outbox: Outbox) -> None:
    @tool
    async def send_email(to: str, body: str) -> str:
        """Email a customer."""
        return outbox.send(to, body)

    model = StepModel(calls=emails(*PEOPLE), usage=(10, 5))
    budget = c4a.Budget(max_tool_calls=2, soft=0.5)
    ledger = target.open()
    graph = agent(model, [send_email], OnceOnly(ledger=ledger, budget=budget))

    async def main() -> None:
        with pytest.raises(c4a.BudgetExceeded) as caught:
            await graph.ainvoke({"messages": [HumanMessage("mail them")]}, config())
        assert caught.value.detail == "2 tool calls"

    asyncio.run(main())
    assert sent(outbox) == ["ann@x", "bob@x"]
    spent = usage(ledger, "thread-1")
    assert (spent.tool_calls, spent.model_requests, spent.input_tokens) == (2, 3, 30)
    # After the first email (1 of 2 tool calls: 50%) every request carries the note.
    assert [bool(t) for t in model.system_texts()] == [False, True, True]


def test_per_tool_limit_cuts_only_that_tool(target: Target, outbox: Outbox) -> None:
    ledger = target.open()
    texts: list[str] = []

    @tool
    def send_sms(to: str) -> str:
        """Text a customer."""
        texts.append(to)
        return f"texted {to}"

    calls = [*emails("ann@x", "bob@x"), ("send_sms", {"to": "ann@x"}), *emails("cy@x")]
    once = OnceOnly(ledger=ledger, budget=c4a.Budget(max_calls_per_tool=2))
    graph = agent(StepModel(calls=calls), [emailer(outbox), send_sms], once)
    with pytest.raises(c4a.BudgetExceeded) as caught:
        graph.invoke({"messages": [HumanMessage("tell them")]}, config())
    assert (caught.value.reason, caught.value.detail) == ("step_limit", "2 calls of send_email")
    assert sent(outbox) == ["ann@x", "bob@x"]
    assert texts == ["ann@x"]  # another tool keeps its own allowance
    assert usage(ledger, "thread-1").per_tool == {"send_email": 2, "send_sms": 1}


def test_the_deadline_ends_a_later_invoke_of_the_thread(target: Target, outbox: Outbox) -> None:
    ledger = target.open()
    model = StepModel(calls=emails("ann@x"))
    once = OnceOnly(ledger=ledger, budget=c4a.Budget(deadline=3600))
    graph = agent(model, [emailer(outbox)], once)
    graph.invoke({"messages": [HumanMessage("mail ann")]}, config())
    requests = len(model.seen)
    # An hour passes (moved in the ledger rather than waited for), then the thread goes on.
    with ledger.engine.begin() as conn:
        conn.execute(
            update(run_counters)
            .where(run_counters.c.run_id == "thread-1", run_counters.c.name == "started_at")
            .values(value=run_counters.c.value - 3601)
        )
    with pytest.raises(c4a.BudgetExceeded) as caught:
        graph.invoke({"messages": [HumanMessage("and again")]}, config())
    assert caught.value.reason == "deadline"
    assert len(model.seen) == requests  # no request was made past the deadline
    assert sent(outbox) == ["ann@x"]
    status = ledger.run_status("thread-1")
    assert status is not None
    assert status.status == "deadline"


def test_an_enclosing_run_budget_still_applies(target: Target, outbox: Outbox) -> None:
    ledger = c4a.init(target.open())
    model = StepModel(calls=emails(*PEOPLE))
    graph = agent(model, [emailer(outbox)], OnceOnly())
    with pytest.raises(c4a.BudgetExceeded), c4a.run("job-7", budget=c4a.Budget(max_tool_calls=3)):
        graph.invoke({"messages": [HumanMessage("mail them")]}, config("thread-9"))
    assert len(outbox) == 3
    # The thread's calls count against the enclosing run, whose ending is recorded.
    assert usage(ledger, "job-7").tool_calls == 3
    status = ledger.run_status("job-7")
    assert status is not None
    assert status.status == "step_limit"


def test_two_workers_share_one_budget(target: Target, outbox: Outbox) -> None:
    budget = c4a.Budget(max_tool_calls=3)
    first, second = StepModel(calls=emails("ann@x", "bob@x")), StepModel(calls=emails(*PEOPLE))
    # Two workers: their own ledger connections and checkpoints, the same thread.
    agent(first, [emailer(outbox)], OnceOnly(ledger=target.open(), budget=budget)).invoke(
        {"messages": [HumanMessage("mail ann and bob")]}, config()
    )
    other = agent(second, [emailer(outbox)], OnceOnly(ledger=target.open(), budget=budget))
    with pytest.raises(c4a.BudgetExceeded):
        other.invoke({"messages": [HumanMessage("mail everyone")]}, config())
    # The second worker's ann and bob are repeats (free); cy is the third call; dee is refused.
    assert sent(outbox) == ["ann@x", "bob@x", "cy@x"]


def test_a_sub_agent_spends_the_parents_budget(target: Target, outbox: Outbox) -> None:
    ledger = target.open()
    sub_model = StepModel(calls=emails("sub1@x", "sub2@x"))
    sub_agent = create_agent(sub_model, [emailer(outbox)], middleware=[OnceOnly(ledger=ledger)])

    @tool
    def delegate(task: str) -> str:
        """Hand a task to the mailing agent."""
        out = sub_agent.invoke({"messages": [HumanMessage(task)]}, config("sub-thread"))
        return str(out["messages"][-1].content)

    model = StepModel(calls=[("delegate", {"task": "mail the team"}), *emails("boss@x")])
    budget = c4a.Budget(max_tool_calls=3, max_model_requests=10)
    graph = agent(model, [delegate, emailer(outbox)], OnceOnly(ledger=ledger, budget=budget))
    with pytest.raises(c4a.BudgetExceeded) as caught:
        graph.invoke({"messages": [HumanMessage("get it done")]}, config("parent"))
    # delegate, sub1 and sub2 are three calls of the parent's run: boss is refused.
    assert caught.value.run_id == "parent"
    assert sent(outbox) == ["sub1@x", "sub2@x"]
    spent = usage(ledger, "parent")
    assert spent.tool_calls == 3
    assert spent.per_tool == {"delegate": 1, "send_email": 2}
    assert spent.model_requests == 2 + 3  # the parent's two and the sub-agent's three
    assert [r.tool for r in ledger.effects("sub-thread")] == ["send_email", "send_email"]


def test_a_budget_cut_inside_a_sub_agent_ends_the_parent_run(
    target: Target, outbox: Outbox
) -> None:
    ledger = target.open()
    sub_model = StepModel(calls=emails("sub1@x", "sub2@x"))
    sub_agent = create_agent(sub_model, [emailer(outbox)], middleware=[OnceOnly(ledger=ledger)])

    @tool
    def delegate(task: str) -> str:
        """Hand a task to the mailing agent."""
        out = sub_agent.invoke({"messages": [HumanMessage(task)]}, config("sub-thread"))
        return str(out["messages"][-1].content)

    model = StepModel(calls=[("delegate", {"task": "mail the team"})])
    once = OnceOnly(ledger=ledger, budget=c4a.Budget(max_tool_calls=2))
    graph = agent(model, [delegate], once)
    with pytest.raises(c4a.BudgetExceeded):
        graph.invoke({"messages": [HumanMessage("get it done")]}, config("parent"))
    assert sent(outbox) == ["sub1@x"]
    [delegated] = ledger.effects("parent")
    assert delegated.state == "failed"  # it did not finish: a resume asks the sub-agent again
    assert "step limit" not in shown_to_model(model) + shown_to_model(sub_model)


def test_a_toolnode_that_handles_errors_still_ends_the_run(target: Target, outbox: Outbox) -> None:
    """ToolNode(handle_tool_errors=True) turns exceptions into messages; a budget cut passes."""
    model = StepModel(calls=emails(*PEOPLE))
    once = OnceOnly(ledger=target.open(), budget=c4a.Budget(max_tool_calls=1))
    graph = _toolnode_graph(model, [emailer(outbox)], once)
    with pytest.raises(c4a.BudgetExceeded):
        graph.invoke({"messages": [HumanMessage("mail them")]}, config())
    assert sent(outbox) == ["ann@x"]
    assert "step limit" not in shown_to_model(model)


def _toolnode_graph(model: StepModel, tools: list[Any], once: OnceOnly) -> Any:
    builder = StateGraph(MessagesState)
    builder.add_node("agent", lambda state: {"messages": [model.invoke(state["messages"])]})
    node = ToolNode(
        tools,
        wrap_tool_call=once.wrap_tool_call,
        awrap_tool_call=once.awrap_tool_call,
        handle_tool_errors=True,
    )
    builder.add_node("tools", node)
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    return builder.compile(checkpointer=InMemorySaver())


def test_a_budget_without_a_thread_id_is_refused(target: Target, outbox: Outbox) -> None:
    once = OnceOnly(ledger=target.open(), budget=c4a.Budget(max_model_requests=5))
    graph = create_agent(StepModel(calls=emails("ann@x")), [emailer(outbox)], middleware=[once])
    with pytest.raises(c4a.ConfigurationError, match="thread_id"):
        graph.invoke({"messages": [HumanMessage("mail ann")]})
    assert len(outbox) == 0


def test_bad_run_control_options_are_refused() -> None:
    with pytest.raises(c4a.ConfigurationError, match=r"takes a c4a\.Budget"):
        OnceOnly(budget={"max_tool_calls": 3})  # type: ignore[arg-type]
    with pytest.raises(c4a.ConfigurationError, match=r"\['timeout'\] is not understood \(in Once"):
        OnceOnly(escalate_on=("in_doubt", "timeout"))


@pytest.mark.slow
@pytest.mark.parametrize(
    ("limit", "detail"), [("MAX_CALLS", "3 tool calls"), ("MAX_REQUESTS", "3 model requests")]
)
def test_budget_survives_a_sigkill_and_resume(
    backend: Backend, outbox: Outbox, limit: str, detail: str
) -> None:
    env = backend.env(LG_THREAD="thread-1", LG_OUTBOX=str(outbox.path), **{limit: "3"})
    # Killed after bob's email was sent and recorded, before LangGraph saved the step.
    crashed = child("budget_child.py", "start", env={**env, "LG_KILL_AFTER": "2"})
    assert crashed.killed, crashed.stderr
    assert sent(outbox) == ["ann@x", "bob@x"]

    resumed = child("budget_child.py", "resume", env=env)
    assert resumed.returncode == 0, resumed.stderr
    # LangGraph's own counters start again on a resume; the ledger's do not: bob's repeat is
    # free, cy is the third, and the run ends before dee.
    assert resumed.report == {"ended": "step_limit", "detail": detail}
    assert sent(outbox) == ["ann@x", "bob@x", "cy@x"]


# -- escalation ------------------------------------------------------------------------------------


def refund_tools(outbox: Outbox) -> list[Any]:
    @tool
    def refund(order: str, amount: int) -> dict[str, Any]:
        """Refund an order."""
        outbox.send(f"refund:{order}", str(amount))
        return {"refund_id": "re_1", "amount": amount}

    @tool
    def wire_money(amount: int) -> str:
        """Wire money to a customer."""
        if amount > 1000:
            c4a.escalate(
                "amount over the wire limit",
                what_remains=["wire the money after sign-off"],
                blocking_fact=f"{amount} > 1000",
            )
        return "wired"

    return [refund, emailer(outbox), wire_money]


REFUND_PLAN = [
    ("refund", {"order": "o-7", "amount": 120}),
    ("send_email", {"to": "bob@x", "body": BODY}),
    ("wire_money", {"amount": 5000}),
    ("send_email", {"to": "never@x", "body": BODY}),
]


def cli(target: Target, *argv: str) -> int:
    full = [*argv, "--url", target.url, *(["--schema", target.schema] if target.schema else [])]
    return cli_main(full)


def test_escalation_inside_a_tool_ends_the_run(
    target: Target, outbox: Outbox, capsys: pytest.CaptureFixture[str]
) -> None:
    ledger = target.open()
    model = StepModel(calls=REFUND_PLAN)
    graph = agent(model, refund_tools(outbox), OnceOnly(ledger=ledger))
    with pytest.raises(c4a.Escalated) as caught:
        graph.invoke({"messages": [HumanMessage("sort out bob")]}, config("ticket-9"))
    handoff = caught.value.handoff
    assert handoff.run_id == "ticket-9"
    assert [(d["tool"], d["args"]) for d in handoff.done] == [
        ("refund", {"order": "o-7", "amount": 120}),
        ("send_email", {"to": "bob@x", "body": BODY}),
    ]
    assert [(f["tool"], f["args"]) for f in handoff.failed] == [("wire_money", {"amount": 5000})]
    assert handoff.blocking_fact == "5000 > 1000"
    assert len(model.seen) == 3  # never asked again with the escalation as a tool error
    assert sent(outbox) == ["refund:o-7", "bob@x"]
    status = ledger.run_status("ticket-9")
    assert status is not None
    assert status.status == "escalated"
    [wire] = [r for r in ledger.effects("ticket-9") if r.tool == "wire_money"]
    assert wire.state == "failed"
    assert wire.result is None

    assert cli(target, "show", "ticket-9") == 0
    out = capsys.readouterr().out
    assert "Run ticket-9 was escalated: amount over the wire limit" in out
    assert "  - refund " in out
    assert cli(target, "show", "ticket-9", "--handoff", "--json") == 0
    doc = json.loads(capsys.readouterr().out)
    assert [d["tool"] for d in doc["done"]] == ["refund", "send_email"]
    assert [f["tool"] for f in doc["failed"]] == ["wire_money"]


def test_escalation_lists_the_external_ids_tools_reported(target: Target, outbox: Outbox) -> None:
    graph = agent(
        StepModel(calls=REFUND_PLAN), refund_tools(outbox), OnceOnly(ledger=target.open())
    )
    with pytest.raises(c4a.Escalated) as caught:
        graph.invoke({"messages": [HumanMessage("sort out bob")]}, config("ticket-9"))
    ids = [d["external_ids"] for d in caught.value.handoff.done]
    assert ids == [{"refund_id": "re_1"}, {"message_id": "msg-bob@x"}]
    # The tool's own value, not the ToolMessage LangGraph wrapped it in.
    assert caught.value.handoff.done[0]["result"]["refund_id"] == "re_1"
    assert "ToolMessage" not in caught.value.handoff.text()


@pytest.mark.parametrize("where", ["toolnode", "tool_error_middleware"])
def test_escalation_is_never_turned_into_a_message(
    target: Target, outbox: Outbox, where: str
) -> None:
    """Error handlers that catch the tool's exception first still let the escalation end it."""
    ledger = target.open()
    model = StepModel(calls=REFUND_PLAN)
    once = OnceOnly(ledger=ledger)
    if where == "toolnode":
        graph = _toolnode_graph(model, refund_tools(outbox), once)
    else:
        # Listed after OnceOnly, so inside it: it sees the tool's exception before OnceOnly.
        catch_all = ToolErrorMiddleware(on_error=lambda exc, request: f"failed: {exc}")
        graph = create_agent(
            model, refund_tools(outbox), middleware=[once, catch_all], checkpointer=InMemorySaver()
        )
    with pytest.raises(c4a.Escalated) as caught:
        graph.invoke({"messages": [HumanMessage("sort out bob")]}, config("ticket-9"))
    assert [d["tool"] for d in caught.value.handoff.done] == ["refund", "send_email"]
    assert len(model.seen) == 3
    assert "escalated" not in shown_to_model(model)
    [wire] = [r for r in ledger.effects("ticket-9") if r.tool == "wire_money"]
    assert wire.state == "failed"
    assert wire.error is not None
    assert wire.error.startswith("Escalated: ")


def test_escalation_on_a_hand_built_async_toolnode(target: Target, outbox: Outbox) -> None:
    @tool
    async def wire_money(amount: int) -> str:
        """Wire money to a customer."""
        c4a.escalate("amount over the wire limit", what_remains="wire it after sign-off")

    ledger = target.open()
    model = StepModel(calls=[("wire_money", {"amount": 5000})])
    graph = _toolnode_graph(model, [wire_money], OnceOnly(ledger=ledger))

    async def main() -> c4a.Handoff:
        with pytest.raises(c4a.Escalated) as caught:
            await graph.ainvoke({"messages": [HumanMessage("wire it")]}, config("ticket-3"))
        return caught.value.handoff

    handoff = asyncio.run(main())
    assert [f["tool"] for f in handoff.failed] == ["wire_money"]
    assert handoff.what_remains == ["wire it after sign-off"]
    assert len(model.seen) == 1


def test_a_read_tool_escalates_in_the_threads_run(target: Target) -> None:
    @tool
    def check_balance(account: str) -> str:
        """Look at an account's balance."""
        c4a.escalate("the account is frozen", blocking_fact=f"{account} is frozen")

    ledger = target.open()
    once = OnceOnly(ledger=ledger, tools={"check_balance": {"kind": "read"}})
    graph = agent(StepModel(calls=[("check_balance", {"account": "acc-1"})]), [check_balance], once)
    with pytest.raises(c4a.Escalated) as caught:
        graph.invoke({"messages": [HumanMessage("check it")]}, config("ticket-4"))
    assert caught.value.run_id == "ticket-4"  # the thread's run, without a c4a.run of your own
    assert caught.value.handoff.blocking_fact == "acc-1 is frozen"
    assert ledger.effects("ticket-4") == []  # a read is not an action


@pytest.mark.parametrize("where", ["once_only", "per_tool"])
def test_escalate_on_in_doubt(target: Target, outbox: Outbox, where: str) -> None:
    @tool
    def send_email(to: str, body: str) -> str:
        """Email a customer."""
        outbox.send(to, body)
        raise TimeoutError("the mail server did not answer")

    ledger = target.open()
    if where == "once_only":
        once = OnceOnly(ledger=ledger, escalate_on=("in_doubt",))
    else:  # the core's own per-tool option, given in tools=
        once = OnceOnly(ledger=ledger, tools={"send_email": {"escalate_on": ("in_doubt",)}})
    graph = agent(StepModel(calls=emails("ann@x")), [send_email], once)
    with pytest.raises(c4a.Escalated) as caught:
        graph.invoke({"messages": [HumanMessage("mail ann")]}, config())
    handoff = caught.value.handoff
    assert handoff.reason == "send_email may or may not have happened"
    assert handoff.blocking_fact == "TimeoutError: the mail server did not answer"
    assert [(d["tool"], d["args"]["to"]) for d in handoff.in_doubt] == [("send_email", "ann@x")]
    assert handoff.done == []
    # A resume meets the call in doubt: the same policy ends the run again, nothing is re-sent.
    with pytest.raises(c4a.Escalated):
        graph.invoke(None, config())
    assert sent(outbox) == ["ann@x"]


def test_escalate_on_denied(target: Target, outbox: Outbox) -> None:
    ledger = target.open()
    once = OnceOnly(
        ledger=ledger, tools={"send_email": {"approval": True}}, escalate_on=("denied",)
    )
    graph = agent(StepModel(calls=emails("ann@x")), [emailer(outbox)], once)
    paused = graph.invoke({"messages": [HumanMessage("mail ann")]}, config(), version="v2")
    [pause] = paused.interrupts
    answer = {"type": "reject", "message": "wrong customer", "by": "ann"}
    with pytest.raises(c4a.Escalated) as caught:
        graph.invoke(Command(resume=answer), config(), version="v2")
    assert caught.value.handoff.reason == "a person denied send_email"
    assert caught.value.handoff.blocking_fact == "denied by ann: wrong customer"
    assert pause.value["name"] == "send_email"
    assert len(outbox) == 0


@pytest.mark.parametrize(
    ("limit", "detail"),
    [("max_model_requests", "1 model requests"), ("max_tool_calls", "1 tool calls")],
)
def test_escalate_on_budget(target: Target, outbox: Outbox, limit: str, detail: str) -> None:
    ledger = target.open()
    budget = c4a.Budget(**{limit: 1})
    once = OnceOnly(ledger=ledger, budget=budget, escalate_on=("budget",))
    graph = agent(StepModel(calls=emails("ann@x", "bob@x")), [emailer(outbox)], once)
    with pytest.raises(c4a.Escalated) as caught:
        graph.invoke({"messages": [HumanMessage("mail them")]}, config())
    handoff = caught.value.handoff
    assert handoff.reason == "the run hit its step limit"
    assert handoff.blocking_fact == detail
    assert [d["args"]["to"] for d in handoff.done] == ["ann@x"]
    assert isinstance(caught.value.__cause__, c4a.BudgetExceeded)
    assert sent(outbox) == ["ann@x"]
    status = ledger.run_status("thread-1")
    assert status is not None
    assert status.status == "escalated"
    assert status.details["budget"]["reason"] == "step_limit"  # the cut is kept beside it


# -- undo and read-before-write -------------------------------------------------------------------


def test_undo_a_langgraph_thread(target: Target, outbox: Outbox) -> None:
    recalled: list[str] = []

    def recall(result: dict[str, str], *, to: str, body: str) -> str:
        recalled.append(f"{result['message_id']} ({body})")  # the tool's own dict, not a message
        return "recalled"

    ledger = target.open()
    once = OnceOnly(ledger=ledger, tools={"send_email": {"undo": recall}})
    graph = agent(StepModel(calls=emails("ann@x", "bob@x")), [emailer(outbox)], once)
    graph.invoke({"messages": [HumanMessage("mail them")]}, config())

    report = ledger.undo("thread-1")
    assert report.status == "undone"
    assert [(i.args["to"], i.outcome) for i in report.items] == [
        ("bob@x", "undone"),  # newest first
        ("ann@x", "undone"),
    ]
    assert recalled == [f"msg-bob@x ({BODY})", f"msg-ann@x ({BODY})"]
    again = ledger.undo("thread-1")
    assert [i.outcome for i in again.items] == ["already_undone", "already_undone"]
    assert len(recalled) == 2


def test_find_existing_settles_a_lost_answer(target: Target, tmp_path: Path) -> None:
    tracker: list[str] = []

    @tool
    def open_ticket(title: str) -> str:
        """Open a ticket in a tracker that takes no idempotency key."""
        tracker.append(f"{title} {c4a.key_marker()}")
        if len(tracker) == 1:
            raise TimeoutError("the tracker created it, but its answer was lost")
        return tracker[-1]

    def find_ticket(title: str) -> dict[str, str] | None:
        found = c4a.find_marked(tracker)
        return None if found is None else {"id": "T-1", "title": found}

    ledger = target.open()
    once = OnceOnly(ledger=ledger, tools={"open_ticket": {"find_existing": find_ticket}})
    model = StepModel(calls=[("open_ticket", {"title": "refund o-7"})])
    graph = agent(model, [open_ticket], once)
    with pytest.raises(TimeoutError):  # create_agent's ToolNode re-raises a tool's exception
        graph.invoke({"messages": [HumanMessage("open a ticket")]}, config())
    [ticket] = tracker
    [record] = ledger.effects("thread-1")
    assert record.state == "in_doubt"

    out = graph.invoke(None, config())  # the resume asks the finder instead of creating again
    assert tracker == [ticket]
    [found] = ledger.effects("thread-1")
    assert (found.state, found.resolved_by) == ("succeeded", "check")
    [message] = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert json.loads(str(message.content)) == {"id": "T-1", "title": ticket}
    assert message.response_metadata["call4agents"]["outcome"] == "deduped"
    assert message.tool_call_id == "call_0"


def test_find_existing_answers_before_the_tool_runs(target: Target) -> None:
    created: list[str] = []

    @tool
    def open_ticket(title: str) -> str:
        """Open a ticket."""
        created.append(title)
        return f"created {title}"

    def find_ticket(title: str) -> dict[str, str]:
        return {"id": "T-9", "title": title}  # the tracker already has it

    ledger = target.open()
    once = OnceOnly(ledger=ledger, tools={"open_ticket": {"find_existing": find_ticket}})
    graph = agent(StepModel(calls=[("open_ticket", {"title": "refund"})]), [open_ticket], once)
    out = graph.invoke({"messages": [HumanMessage("open a ticket")]}, config())
    assert created == []
    [record] = ledger.effects("thread-1")
    assert record.state == "succeeded"
    assert isinstance(record.result, ToolMessage)
    assert record.result.artifact == {"id": "T-9", "title": "refund"}  # the found resource
    [message] = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert json.loads(str(message.content)) == {"id": "T-9", "title": "refund"}
