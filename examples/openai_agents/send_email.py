"""An Agents SDK agent whose email goes out once, though its job is delivered twice.

The model is the SDK's offline ScriptedModel, so this runs without a network or an API key. The
second delivery is what a queue retry or a restarted worker does: the same job, the same session,
and a model that asks for the same email again (with a new tool call id).
"""

from __future__ import annotations

import uuid

from agents import Agent, Runner, SQLiteSession, function_tool, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call

import call4agents as c4a
from call4agents_openai_agents import OnceOnly

set_tracing_disabled(True)  # nothing leaves the machine
c4a.init()  # the ledger: .c4a/ledger.db, or $CALL4AGENTS_URL
sent: list[str] = []


@function_tool
def send_email(to: str, body: str) -> str:
    """Send an email to a customer."""
    sent.append(to)  # the real world would see this
    return f"email sent to {to} (idempotency key {c4a.current().idempotency_key})"


def support_agent() -> Agent[None]:
    email = {"to": "bob@example.com", "body": "Your refund is on its way."}
    model = ScriptedModel(
        [
            [function_call("send_email", email, call_id=f"call_{uuid.uuid4().hex[:8]}")],
            [assistant_message("I emailed Bob about his refund.")],
        ]
    )
    return Agent(name="support", instructions="Help customers.", model=model, tools=[send_email])


once = OnceOnly()
session = once.session(SQLiteSession(f"ticket-{uuid.uuid4().hex[:6]}"))  # run id = session id
for delivery in (1, 2):
    agent = once.wrap(support_agent())  # the one line
    result = Runner.run_sync(agent, "Tell Bob his refund is on its way.", session=session)
    [tool_output] = [i.output for i in result.new_items if i.type == "tool_call_output_item"]
    print(f"delivery {delivery}: tool said {tool_output!r}")
print(f"emails actually sent: {len(sent)}")
