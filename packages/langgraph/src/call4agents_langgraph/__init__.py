"""Once-only tool calls for LangChain agents and LangGraph graphs.

from call4agents_langgraph import OnceOnly

agent = create_agent(model, tools, checkpointer=saver, middleware=[OnceOnly()])
agent.invoke(inputs, {"configurable": {"thread_id": "ticket-1234"}})   # the thread is the run
"""

from __future__ import annotations

_INSTALL = 'pip install "call4agents-core[langgraph]"'

try:
    import langchain.agents.middleware  # noqa: F401
    import langgraph.types  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised only without the framework
    raise ImportError(
        f"call4agents_langgraph needs LangGraph and LangChain ({exc.name} is missing; LangChain "
        f"1.5 needs Python 3.11 or later): {_INSTALL}"
    ) from exc

from call4agents.integration import require_core  # noqa: E402

require_core("langgraph")

from ._checkpointer import LedgerCheckpointer  # noqa: E402
from ._middleware import OnceOnly  # noqa: E402

__all__ = ["LedgerCheckpointer", "OnceOnly"]
