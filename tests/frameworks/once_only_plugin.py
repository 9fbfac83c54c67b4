"""A pytest plugin that switches OnceOnly on in a framework's own tests.

Loaded with ``-p once_only_plugin`` (this folder on ``PYTHONPATH``: the framework's own tests
are a ``tests`` package of their own): every ``create_agent(...)`` the tests make
gets ``OnceOnly()`` appended to its middleware list, and each test records in a fresh SQLite
ledger of its own. Nothing else of the tests changes.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import langchain.agents
import langchain.agents.factory
from plugin_ledger import _fresh_ledger  # noqa: F401  (an autouse fixture, by import)

from call4agents_langgraph import OnceOnly

_bare_create_agent = langchain.agents.factory.create_agent


def _create_agent(*args: Any, middleware: Sequence[Any] = (), **kwargs: Any) -> Any:
    agent = _bare_create_agent(*args, middleware=[*middleware, OnceOnly()], **kwargs)
    # OnceOnly keys calls by the thread id; most of the suite invokes without one (no
    # checkpointer), so the graph gets a default thread, which a test's own config overrides.
    default = dict(agent.config or {})
    thread = {"thread_id": f"suite-{uuid.uuid4().hex}"}
    default["configurable"] = {**thread, **default.get("configurable", {})}
    agent.config = default
    return agent


# Before the test modules are imported, so their `from ... import create_agent` gets this one.
langchain.agents.factory.create_agent = _create_agent  # type: ignore[assignment]
langchain.agents.create_agent = _create_agent  # type: ignore[assignment]
