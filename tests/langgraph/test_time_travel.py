"""Time travel: invoking from an earlier checkpoint forks the thread and re-runs what follows."""

from __future__ import annotations

from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage

import call4agents as c4a
from call4agents_langgraph import OnceOnly
from tests.langgraph.helpers import Backend, Outbox
from tests.langgraph.test_middleware import config, emailer, model, outcome, tool_messages


def _agent(once: OnceOnly | None, outbox: Outbox, saver: Any) -> Any:
    middleware = [once] if once else []
    return create_agent(
        model("bob@x"), [emailer(outbox)], middleware=middleware, checkpointer=saver
    )


def _checkpoint_before(agent: Any, node: str) -> Any:
    """The first checkpoint about to run ``node`` (history lists the newest first)."""
    return [s for s in agent.get_state_history(config()) if s.next == (node,)][-1].config


@pytest.mark.parametrize("node", ["tools", "model"])
@pytest.mark.parametrize(("with_once", "emails"), [(False, 2), (True, 1)])
def test_fork_from_an_earlier_checkpoint(
    backend: Backend, outbox: Outbox, node: str, with_once: bool, emails: int
) -> None:
    once = OnceOnly(ledger=backend.ledger()) if with_once else None
    with backend.saver() as saver:
        agent = _agent(once, outbox, saver)
        agent.invoke({"messages": [HumanMessage("mail bob")]}, config())
        forked = agent.invoke(None, _checkpoint_before(agent, node))
    assert len(outbox) == emails
    if with_once:
        assert outcome(tool_messages(forked)[-1]) == "deduped"


def test_a_fork_asked_to_rerun_runs_again(backend: Backend, outbox: Outbox) -> None:
    ledger = backend.ledger()
    once = OnceOnly(ledger=ledger)
    with backend.saver() as saver:
        agent = _agent(once, outbox, saver)
        agent.invoke({"messages": [HumanMessage("mail bob")]}, config())
        branch = once.rerun(agent, _checkpoint_before(agent, "tools"), label="retry-2")
        rerun = agent.invoke(None, branch)
        # The branch keeps its label: a later turn on it is keyed in the branch's run.
        agent.invoke({"messages": [HumanMessage("mail bob again")]}, config())
    assert len(outbox) == 2
    assert outcome(tool_messages(rerun)[-1]) == "ran"
    assert sorted(r.run_id for r in ledger.effects()) == ["thread-1", "thread-1#retry-2"]


def test_rerun_needs_a_label(sqlite_backend: Backend, outbox: Outbox) -> None:
    once = OnceOnly(ledger=sqlite_backend.ledger())
    with sqlite_backend.saver() as saver:
        agent = _agent(once, outbox, saver)
        with pytest.raises(c4a.ConfigurationError, match="label"):
            once.rerun(agent, config(), label=" ")
