"""A child process for the approval races: ask for approval, or continue an approved run.

Usage: approval_child.py ask|continue|bare|resume|deny|deny-bare WORKDIR [NAME]

"ask" runs the agent until it stops for approval and saves the history and the requests.
The others continue the saved history (WORKDIR/history.json, which a test may have edited):
"continue" approves every request as "ann", echoing the metadata (the honest app); "bare" sends
the same yes keyed by tool call id alone; "resume" sends no answer (a yes given in the ledger);
"deny" answers no with a reason ("deny-bare" without the metadata). Each waits until every
worker named in WORKDIR/workers has reached the same point, then runs. The tool sends slowly,
so a second worker meets the first one's live lease.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from pydantic import TypeAdapter
from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults, ToolDenied
from pydantic_ai.messages import ModelMessagesTypeAdapter

import call4agents as c4a
from call4agents_pydantic_ai import OnceOnly
from tests.pydantic_ai.scripted import Outbox, returns_in, scripted

step, workdir = sys.argv[1], Path(sys.argv[2])
name = sys.argv[3] if len(sys.argv) > 3 else "asker"
outbox = Outbox(workdir / "outbox.jsonl")
requests_adapter = TypeAdapter(DeferredToolRequests)

c4a.init(os.environ["C4A_TEST_URL"], schema=os.environ.get("C4A_TEST_SCHEMA") or None)
bob = {"to": "bob@example.com", "body": "Your refund is approved"}
agent: Agent[None, object] = Agent(
    scripted([("send_email", bob, "call-1")]),
    output_type=[str, DeferredToolRequests],
    capabilities=[OnceOnly(tools={"send_email": {"approval": True}})],
)


@agent.tool_plain
def send_email(to: str, body: str) -> str:
    """Email a customer."""
    time.sleep(0.5)  # widen the window in which a second worker meets the live lease
    return outbox.send(to, body)


def barrier() -> None:
    (workdir / f"ready-{name}").touch()
    workers = (workdir / "workers").read_text().split()
    while not all((workdir / f"ready-{w}").exists() for w in workers):
        time.sleep(0.01)


if step == "ask":
    result = agent.run_sync("Tell Bob", conversation_id="ticket-9")
    assert isinstance(result.output, DeferredToolRequests)
    (workdir / "history.json").write_bytes(
        ModelMessagesTypeAdapter.dump_json(result.all_messages())
    )
    (workdir / "requests.json").write_bytes(requests_adapter.dump_json(result.output))
else:
    history = ModelMessagesTypeAdapter.validate_json((workdir / "history.json").read_bytes())
    requests = requests_adapter.validate_json((workdir / "requests.json").read_bytes())
    ids = [c.tool_call_id for c in requests.approvals]
    answers: dict[str, bool | ToolDenied] = {
        "continue": True,
        "bare": True,
        "deny": ToolDenied("wrong customer"),
        "deny-bare": ToolDenied("wrong customer"),
    }
    results = (
        DeferredToolResults(
            approvals=dict.fromkeys(ids, answers[step]),
            metadata={} if step.endswith("bare") else requests.metadata,
            answered_by=dict.fromkeys(ids, "lead" if step.startswith("deny") else "ann"),
        )
        if step != "resume"
        else None
    )
    barrier()
    done = agent.run_sync(message_history=history, deferred_tool_results=results)
    print(json.dumps(returns_in(done.new_messages())))
