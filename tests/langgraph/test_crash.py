"""Real create_agent children SIGKILLed around a tool call, then resumed from their checkpoints.

Emails are counted in an outbox file the tool writes; the ledger never writes it. The agent is
started with a break before the tools node, so even durability="exit" has a checkpoint to resume
from with invoke(None, config); the tool then runs on the first resume, which is killed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.langgraph.helpers import Backend, Outbox, child

pytestmark = pytest.mark.slow


def _env(backend: Backend, outbox: Outbox, **extra: str) -> dict[str, str]:
    return backend.env(LG_THREAD="thread-1", LG_OUTBOX=str(outbox.path), **extra)


def _run_to_the_break(env: dict[str, str]) -> None:
    started = child("agent_child.py", "start", env=env)
    assert started.returncode == 0, started.stderr
    assert started.report == {"tool_messages": [], "interrupts": []}


@pytest.mark.parametrize("durability", ["sync", "exit"])
@pytest.mark.parametrize(("mode", "emails"), [("plain", 2), ("once", 1)])
def test_killed_after_sending_then_resumed(
    backend: Backend, outbox: Outbox, mode: str, emails: int, durability: str
) -> None:
    env = _env(backend, outbox, LG_MODE=mode, LG_DURABILITY=durability, LG_BREAK="1")
    _run_to_the_break(env)
    crashed = child("agent_child.py", "resume", env={**env, "LG_CRASH": "after"})
    assert crashed.killed, crashed.stderr
    assert len(outbox) == 1

    resumed = child("agent_child.py", "resume", env=env)
    assert resumed.returncode == 0, resumed.stderr
    assert len(outbox) == emails
    [message] = resumed.report["tool_messages"]
    assert message["status"] == "success"
    assert message["outcome"] == ("deduped" if mode == "once" else None)


@pytest.mark.parametrize(("mode", "emails"), [("plain", 2), ("once", 1)])
def test_killed_before_any_checkpoint_then_sent_again(
    sqlite_backend: Backend, outbox: Outbox, mode: str, emails: int
) -> None:
    # durability="exit" saves nothing before the crash: the app can only send the message again.
    env = _env(sqlite_backend, outbox, LG_MODE=mode, LG_DURABILITY="exit")
    assert child("agent_child.py", "start", env={**env, "LG_CRASH": "after"}).killed
    retried = child("agent_child.py", "retry", env=env)
    assert retried.returncode == 0, retried.stderr
    assert len(outbox) == emails


@pytest.mark.parametrize("durability", ["sync", "exit"])
def test_killed_inside_the_tool_is_in_doubt(
    backend: Backend, outbox: Outbox, durability: str
) -> None:
    env = _env(backend, outbox, LG_MODE="once", LG_DURABILITY=durability, LG_BREAK="1")
    _run_to_the_break(env)
    assert child("agent_child.py", "resume", env={**env, "LG_CRASH": "inside"}).killed

    resumed = child("agent_child.py", "resume", env=env)
    assert resumed.returncode == 0, resumed.stderr
    assert len(outbox) == 1
    [message] = resumed.report["tool_messages"]
    assert message["status"] == "error"
    assert message["outcome"] == "refused"
    assert "may or may not have run" in message["content"]
    assert "died while running it" in message["content"]
    [doubt] = backend.ledger().in_doubt()
    assert doubt.run_id == "thread-1"
    assert doubt.args == {"body": "Your refund is on its way", "to": "bob@example.com"}


@pytest.mark.parametrize(("mode", "emails"), [("plain", 2), ("once", 1)])
def test_async_graph_killed_after_sending(
    backend: Backend, outbox: Outbox, mode: str, emails: int
) -> None:
    env = _env(backend, outbox, LG_MODE=mode, LG_ASYNC="1", LG_BREAK="1")
    _run_to_the_break(env)
    assert child("agent_child.py", "resume", env={**env, "LG_CRASH": "after"}).killed
    resumed = child("agent_child.py", "resume", env=env)
    assert resumed.returncode == 0, resumed.stderr
    assert len(outbox) == emails


@pytest.mark.parametrize("use_async", ["0", "1"])
@pytest.mark.parametrize(("mode", "emails"), [("plain", 2), ("once", 1)])
def test_hand_built_toolnode_killed_after_sending(
    sqlite_backend: Backend, outbox: Outbox, mode: str, emails: int, use_async: str
) -> None:
    env = _env(sqlite_backend, outbox, LG_MODE=mode, LG_GRAPH="toolnode", LG_ASYNC=use_async)
    env["LG_BREAK"] = "1"
    _run_to_the_break(env)
    assert child("agent_child.py", "resume", env={**env, "LG_CRASH": "after"}).killed
    resumed = child("agent_child.py", "resume", env=env)
    assert resumed.returncode == 0, resumed.stderr
    assert len(outbox) == emails


def test_parallel_calls_killed_mid_turn_never_send_twice(backend: Backend, tmp_path: Path) -> None:
    outbox = Outbox(tmp_path / "outbox.jsonl")
    people = ["ann@example.com", "bob@example.com", "cy@example.com"]
    env = _env(backend, outbox, LG_MODE="once", LG_EMAILS=",".join(people), LG_BREAK="1")
    _run_to_the_break(env)
    # Killed as soon as the first of the three parallel calls returns: the others may be
    # finished, running, or not started.
    assert child("agent_child.py", "resume", env={**env, "LG_CRASH": "after"}).killed

    resumed = child("agent_child.py", "resume", env=env)
    assert resumed.returncode == 0, resumed.stderr
    sent = [line["to"] for line in outbox.lines()]
    assert len(sent) == len(set(sent))  # nobody got two
    messages = resumed.report["tool_messages"]
    assert len(messages) == 3
    for message in messages:  # each call has its own honest outcome
        if message["status"] == "success":
            assert message["content"].removeprefix("sent to ") in sent
        else:
            assert "may or may not have run" in message["content"]
