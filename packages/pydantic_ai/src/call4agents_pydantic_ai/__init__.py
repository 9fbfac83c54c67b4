"""Once-only tool calls for Pydantic AI agents, as a capability.

    from call4agents_pydantic_ai import OnceOnly

    agent = Agent(model, tools=[send_email], capabilities=[OnceOnly()])
    agent.run_sync("...", conversation_id="ticket-1234")

Every tool call goes through the Call4Agents ledger, keyed by the run's ``conversation_id``: a
resumed or replayed conversation gets the recorded result instead of running the tool again.
``OnceOnly(budget=c4a.Budget(...))`` limits the run's tool calls, model requests and cost, counted
in the ledger; a spent budget or a ``c4a.escalate(...)`` ends the run with ``c4a.BudgetExceeded``
or ``c4a.Escalated`` raised out of ``agent.run``.
"""

from __future__ import annotations

_FIX = 'pip install "call4agents-core[pydantic-ai]"'

try:
    import pydantic_ai.capabilities  # noqa: F401  (the extension point OnceOnly plugs into)
except ImportError as exc:  # pragma: no cover - exercised only without the framework
    raise ImportError(
        "call4agents_pydantic_ai needs Pydantic AI 2.x (pydantic-ai-slim with capabilities), "
        f"which is not installed or too old: {_FIX}"
    ) from exc

from call4agents.integration import require_core  # noqa: E402  (after the framework check)

require_core("pydantic-ai")

from ._capability import OnceOnly  # noqa: E402

__all__ = ["OnceOnly"]
