"""A pytest plugin that switches OnceOnly on in a framework's own tests.

Loaded with ``-p once_only_plugin`` (this folder on ``PYTHONPATH``: the framework's own tests
are a ``tests`` package of their own): every ``create_agent(...)`` the tests make
gets ``OnceOnly()`` appended to its middleware list, and each test records in a fresh SQLite
ledger of its own. Nothing else of the tests changes.
"""

from __future__ import annotations

import importlib
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import langchain.agents
import langchain.agents.factory
import pytest

import call4agents as c4a
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


@pytest.fixture(autouse=True)
def _fresh_ledger(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    folder: Path = tmp_path_factory.mktemp("ledger")
    ledger = c4a.init(f"sqlite:///{folder / 'ledger.db'}")
    try:
        yield
    finally:
        ledger.close()
        default = importlib.import_module("call4agents.engine.default")
        default._default_ledger = None
