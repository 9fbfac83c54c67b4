"""Export a run, replay it with zero real tool calls, and diff two runs."""

from __future__ import annotations

import asyncio
import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import Agent

import call4agents as c4a
from call4agents.facade.cli import main
from call4agents_pydantic_ai import OnceOnly
from tests.conftest import Target
from tests.otel.test_spans import Counted
from tests.pydantic_ai.scripted import Outbox, scripted

SENT_AT = datetime(2026, 11, 30, 9, 0, tzinfo=timezone.utc)


def cli_args(target: Target, *rest: str) -> list[str]:
    schema = ["--schema", target.schema] if target.schema else []
    return ["--url", target.url, *schema, *rest]


class Tools:
    def __init__(self, world: Counted) -> None:
        @c4a.effect(name="send_email")
        def send_email(to: str, body: str) -> dict[str, Any]:
            world.hit()
            return {"id": f"msg-{to}", "sent_at": SENT_AT}

        @c4a.effect(name="charge")
        def charge(amount: int) -> str:
            world.hit()
            raise ValueError("card declined")

        @c4a.effect(name="wire", kind="irreversible")
        async def wire(amount: int) -> str:
            world.hit()
            raise TimeoutError("bank did not answer")

        self.send_email, self.charge, self.wire = send_email, charge, wire


def incident(tools: Tools, run_id: str) -> None:
    with c4a.run(run_id):
        tools.send_email("bob", "hello")
        with pytest.raises(ValueError):
            tools.charge(5)
        with pytest.raises(TimeoutError):
            asyncio.run(tools.wire(100))


def test_export_then_replay_makes_no_real_call(
    target: Target, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    c4a.init(target.open())
    world = Counted(tmp_path / "world.txt")
    tools = Tools(world)
    incident(tools, "incident-1")
    assert world.count() == 3
    out = tmp_path / "incident.json"
    assert main(cli_args(target, "export", "incident-1", "--out", str(out))) == 0
    assert "Wrote 3 action(s)" in capsys.readouterr().out
    document = json.loads(out.read_text())
    assert [a["tool"] for a in document["actions"]] == ["send_email", "charge", "wire"]
    assert [a["state"] for a in document["actions"]] == ["succeeded", "failed", "in_doubt"]
    assert document["actions"][1]["error"] == "ValueError: card declined"

    with c4a.replay(out) as recording, c4a.run("regression"):
        result = tools.send_email("bob", "hello")
        assert result == {"id": "msg-bob", "sent_at": SENT_AT}  # typed values come back typed
        with pytest.raises(c4a.ReplayedFailure, match="card declined"):
            tools.charge(5)
        with pytest.raises(c4a.EffectInDoubt, match="recorded in doubt"):
            asyncio.run(tools.wire(100))
        with pytest.raises(c4a.ReplayMismatch, match="does not have"):
            tools.send_email("alice", "hello")
        with pytest.raises(c4a.ReplayMismatch):
            tools.send_email("bob", "hello")  # each recorded action is served once
        assert recording.unused() == []
    assert world.count() == 3  # zero real tool calls under replay
    assert c4a.default_ledger().effects("regression") == []  # and nothing written
    # After the block, tools run for real again.
    with c4a.run("after"):
        tools.send_email("bob", "hello")
    assert world.count() == 4


def test_replay_a_pydantic_ai_agent(target: Target, tmp_path: Path) -> None:
    outbox = Outbox(tmp_path / "outbox.jsonl")
    calls = [("send_email", {"to": "bob@example.com", "body": "refund"}, "call-1")]

    def build() -> Agent[None, str]:
        agent: Agent[None, str] = Agent(
            scripted(calls), capabilities=[OnceOnly(ledger=target.open())]
        )

        @agent.tool_plain
        def send_email(to: str, body: str) -> str:
            """Email a customer."""
            return outbox.send(to, body)

        return agent

    recorded = build().run_sync("Tell Bob", conversation_id="incident-7").output
    assert outbox.sent() == ["bob@example.com"]
    exported = tmp_path / "incident-7.json"
    assert main(cli_args(target, "export", "incident-7", "--out", str(exported))) == 0
    with c4a.replay(exported):
        replayed = build().run_sync("Tell Bob", conversation_id="regression-7").output
    assert replayed == recorded
    assert outbox.sent() == ["bob@example.com"]  # the replayed agent sent nothing


def test_replay_refuses_other_files(tmp_path: Path) -> None:
    bad = tmp_path / "x.json"
    bad.write_text(json.dumps({"actions": []}))
    with pytest.raises(c4a.ReplayMismatch, match="not a Call4Agents replay file"):
        c4a.replay(bad)


def test_diff_finds_planted_difference(
    target: Target, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    c4a.init(target.open())
    world = Counted(tmp_path / "world.txt")
    tools = Tools(world)
    for run_id, amount in (("model-a", 5), ("model-b", 7), ("model-a2", 5)):
        with c4a.run(run_id):
            tools.send_email("bob", "hello")
            with pytest.raises(ValueError):
                tools.charge(amount)
    capsys.readouterr()
    assert main(cli_args(target, "diff", "model-a", "model-b")) == 1
    text = capsys.readouterr().out
    assert "first differ at action #2 (args)" in text
    assert 'model-a: charge({"amount":5})' in text
    assert 'model-b: charge({"amount":7})' in text
    assert main(cli_args(target, "diff", "model-a", "model-a2")) == 0
    assert "match: 2 action(s)" in capsys.readouterr().out
    exported = tmp_path / "b.json"
    assert main(cli_args(target, "export", "model-b", "--out", str(exported))) == 0
    capsys.readouterr()
    assert main(cli_args(target, "--json", "diff", "model-a", str(exported))) == 1
    found = json.loads(capsys.readouterr().out)
    assert found["index"] == 1
    assert found["fields"] == ["args"]
