"""Which runs warn that their conversation_id cannot be resumed (warnings are once per process).

Usage: warn_child.py WORKDIR. Prints {case: [warning texts]} as JSON.
"""

from __future__ import annotations

import json
import os
import sys
import warnings
from pathlib import Path

from pydantic_ai import Agent, Tool

import call4agents as c4a
from call4agents_pydantic_ai import OnceOnly
from tests.pydantic_ai.scripted import Outbox, scripted

c4a.init(os.environ["C4A_TEST_URL"])
outbox = Outbox(Path(sys.argv[1]) / "outbox.jsonl")
agent: Agent[None, str] = Agent(
    scripted([("send_email", {"to": "bob@example.com", "body": "hi"}, "c1")]),
    tools=[Tool(outbox.send, name="send_email")],
    capabilities=[OnceOnly()],
)
seen: dict[str, list[str]] = {}


def case(name: str, **kwargs: object) -> object:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = agent.run_sync(**kwargs)  # type: ignore[call-overload]
    seen[name] = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    return result


explicit = case("explicit", user_prompt="hi", conversation_id="ticket-3")
case("resumed", message_history=explicit.all_messages()[:2])  # type: ignore[attr-defined]
case("fresh", user_prompt="hi")
case("fresh_again", user_prompt="hi")
print(json.dumps(seen))
