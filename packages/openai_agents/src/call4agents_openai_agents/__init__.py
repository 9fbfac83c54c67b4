"""Once-only function tools for the OpenAI Agents SDK.

    from call4agents_openai_agents import OnceOnly

    once = OnceOnly()
    agent = once.wrap(agent)
    await Runner.run(agent, "...", session=once.session(SQLiteSession("ticket-1234")))

Every function tool of the agent (and of the agents it hands off to) goes through the Call4Agents
ledger, keyed by the run id: a resumed or re-delivered run gets the recorded result instead of a
second side effect, an interrupted call is reported to the model as in doubt, and approvals are
SDK interruptions whose answers are recorded in the ledger, bound to the exact arguments.
``OnceOnly(budget=c4a.Budget(...))`` counts tool calls, model requests and tokens in the ledger
and ends the run at a hard limit; ``c4a.escalate()`` in a tool ends it as escalated.
"""

from __future__ import annotations

_FIX = 'pip install "call4agents-core[openai-agents]"'

try:
    import agents  # noqa: F401  (the OpenAI Agents SDK, whose tools OnceOnly wraps)
except ImportError as exc:  # pragma: no cover - exercised only without the framework
    raise ImportError(
        f"call4agents_openai_agents needs the OpenAI Agents SDK (openai-agents 0.24): {_FIX}"
    ) from exc

from call4agents.integration import require_core  # noqa: E402  (after the framework check)

require_core("openai-agents")

from ._once import OnceOnly  # noqa: E402

__all__ = ["OnceOnly"]
