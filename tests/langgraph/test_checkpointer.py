"""LedgerCheckpointer: checkpoints name the actions done between them; deleting a thread deletes
its ledger records, never while one is in doubt."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Sequence
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver

import call4agents as c4a
from call4agents_langgraph import LedgerCheckpointer, OnceOnly
from tests.langgraph.helpers import Backend, Outbox, child
from tests.langgraph.test_middleware import config, emailer, model


def _agent(ledger: c4a.Ledger, outbox: Outbox, saver: Any, *tools: Any) -> Any:
    return create_agent(
        model("bob@x"),
        list(tools) or [emailer(outbox)],
        middleware=[OnceOnly(ledger=ledger)],
        checkpointer=saver,
    )


def test_each_checkpoint_names_the_actions_done_since_the_last(
    backend: Backend, outbox: Outbox
) -> None:
    ledger = backend.ledger()
    with backend.saver() as saver:
        agent = _agent(ledger, outbox, LedgerCheckpointer(saver, ledger=ledger))
        agent.invoke({"messages": [HumanMessage("mail bob")]}, config())
        history = list(agent.get_state_history(config()))
    [record] = ledger.effects("thread-1")
    noted = {s.metadata["step"]: s.metadata["call4agents"]["actions"] for s in history}
    # Step 2 ran the tools node: its checkpoint, and only it, names the email.
    assert {step: len(actions) for step, actions in noted.items()} == {
        -1: 0,
        0: 0,
        1: 0,
        2: 1,
        3: 0,
    }
    assert noted[2] == [
        {
            "action": record.key,
            "run_id": "thread-1",
            "tool": "send_email",
            "state": "succeeded",
            "attempt": 1,
        }
    ]


def test_ledger_and_checkpoints_in_one_sqlite_file(tmp_path: Any, outbox: Outbox) -> None:
    path = tmp_path / "agent.db"
    ledger = c4a.Ledger(f"sqlite:///{path}")
    conn = sqlite3.connect(path, check_same_thread=False)
    try:
        agent = _agent(ledger, outbox, LedgerCheckpointer(SqliteSaver(conn), ledger=ledger))
        agent.invoke({"messages": [HumanMessage("mail bob")]}, config())
        agent.invoke({"messages": [HumanMessage("mail bob again")]}, config())
        tables = {r[0] for r in conn.execute("select name from sqlite_master where type='table'")}
    finally:
        conn.close()
        ledger.close()
    assert len(outbox) == 1
    assert {"checkpoints", "writes", "c4a_effects"} <= tables


def test_ledger_and_checkpoints_in_one_postgres_database(
    pg_backend: Backend, outbox: Outbox
) -> None:
    ledger = c4a.Ledger(pg_backend.checkpoints.replace("postgresql://", "postgresql+psycopg://"))
    try:
        with pg_backend.saver() as saver:
            agent = _agent(ledger, outbox, LedgerCheckpointer(saver, ledger=ledger))
            agent.invoke({"messages": [HumanMessage("mail bob")]}, config())
            agent.invoke({"messages": [HumanMessage("mail bob again")]}, config())
            LedgerCheckpointer(saver, ledger=ledger).delete_thread("thread-1")
        assert ledger.effects() == []
    finally:
        ledger.close()
    assert len(outbox) == 1


def test_delete_thread_takes_its_records_and_branches(backend: Backend, outbox: Outbox) -> None:
    ledger = backend.ledger()
    with backend.saver() as saver:
        once = OnceOnly(ledger=ledger)
        wrapped = LedgerCheckpointer(saver, ledger=ledger)
        agent = create_agent(
            model("bob@x"), [emailer(outbox)], middleware=[once], checkpointer=wrapped
        )
        agent.invoke({"messages": [HumanMessage("mail bob")]}, config())
        agent.invoke({"messages": [HumanMessage("mail bob")]}, config("other-thread"))
        before = next(s for s in agent.get_state_history(config()) if s.next == ("tools",))
        agent.invoke(None, once.rerun(agent, before.config, label="retry"))
        assert {r.run_id for r in ledger.effects()} == {
            "thread-1",
            "thread-1#retry",
            "other-thread",
        }
        wrapped.delete_thread("thread-1")
        assert agent.get_state(config()).values == {}
    assert [r.run_id for r in ledger.effects()] == ["other-thread"]


def test_delete_thread_is_refused_while_an_action_is_in_doubt(
    backend: Backend, outbox: Outbox
) -> None:
    @tool
    def send_email(to: str, body: str) -> str:
        """Send an email."""
        outbox.send(to, body)
        raise c4a.OutcomeUnknown("the mail server timed out")

    ledger = backend.ledger()
    with backend.saver() as saver:
        wrapped = LedgerCheckpointer(saver, ledger=ledger)
        agent = _agent(ledger, outbox, wrapped, send_email)
        with pytest.raises(c4a.OutcomeUnknown):
            agent.invoke({"messages": [HumanMessage("mail bob")]}, config())
        with pytest.raises(c4a.LedgerError, match="in doubt"):
            wrapped.delete_thread("thread-1")
        assert agent.get_state(config()).values != {}  # nothing was deleted
        [doubt] = ledger.in_doubt()
        ledger.resolve(doubt.key, happened=True, result="sent", by="ann")
        wrapped.delete_thread("thread-1")
    assert ledger.effects() == []


def test_async_saver(sqlite_backend: Backend, outbox: Outbox) -> None:
    ledger = sqlite_backend.ledger()

    async def main() -> list[Any]:
        async with sqlite_backend.asaver() as saver:
            wrapped = LedgerCheckpointer(saver, ledger=ledger)
            agent = _agent(ledger, outbox, wrapped)
            await agent.ainvoke({"messages": [HumanMessage("mail bob")]}, config())
            notes = [
                a
                async for s in agent.aget_state_history(config())
                for a in s.metadata["call4agents"]["actions"]
            ]
            await wrapped.adelete_thread("thread-1")
            return notes

    notes = asyncio.run(main())
    assert [n["tool"] for n in notes] == ["send_email"]
    assert ledger.effects() == []


class RecordingSaver(InMemorySaver):
    """A real in-memory saver that also keeps what the wrapper handed it."""

    def __init__(self) -> None:
        super().__init__()
        self.task_paths: list[str] = []

    def put_writes(
        self, config: Any, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        self.task_paths.append(task_path)
        super().put_writes(config, writes, task_id, task_path)


def test_put_writes_gets_the_task_path_and_other_methods_pass_through(
    sqlite_backend: Backend, outbox: Outbox
) -> None:
    inner = RecordingSaver()
    wrapped = LedgerCheckpointer(inner, ledger=sqlite_backend.ledger())
    agent = _agent(sqlite_backend.ledger(), outbox, wrapped)
    agent.invoke({"messages": [HumanMessage("mail bob")]}, config())
    assert any(path.startswith("~__pregel_push") for path in inner.task_paths)
    # The wrapped saver's versions (strings here), never the base class's default (ints).
    assert wrapped.get_next_version(None, None).startswith("0000")
    assert wrapped.storage is inner.storage  # anything else reaches the wrapped saver
    assert isinstance(wrapped.with_allowlist([("tests", "x")]), LedgerCheckpointer)


@pytest.mark.slow
def test_a_crashed_process_leaves_its_action_to_the_next_checkpoint(
    sqlite_backend: Backend, outbox: Outbox
) -> None:
    env = sqlite_backend.env(
        LG_MODE="once", LG_WRAP="1", LG_THREAD="thread-1", LG_OUTBOX=str(outbox.path)
    )
    assert child("agent_child.py", "start", env={**env, "LG_CRASH": "after"}).killed
    assert child("agent_child.py", "resume", env=env).returncode == 0
    ledger = sqlite_backend.ledger()
    conn = sqlite3.connect(sqlite_backend.checkpoints, check_same_thread=False)
    try:
        saver = LedgerCheckpointer(SqliteSaver(conn), ledger=ledger)
        history = list(saver.list(config()))
    finally:
        conn.close()
    noted = [a["tool"] for s in history for a in s.metadata["call4agents"]["actions"]]
    assert noted == ["send_email"]
    assert len(outbox) == 1
