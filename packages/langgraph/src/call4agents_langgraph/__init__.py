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

import call4agents  # noqa: E402

if not getattr(call4agents, "__c4a_core__", False):  # pragma: no cover
    raise ImportError(
        "the installed `call4agents` is not the Call4Agents core (PyPI has an unrelated project "
        f"of that name): pip uninstall call4agents, then {_INSTALL}"
    )

from ._checkpointer import LedgerCheckpointer  # noqa: E402
from ._middleware import OnceOnly  # noqa: E402

__all__ = ["LedgerCheckpointer", "OnceOnly"]
