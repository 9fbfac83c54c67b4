"""A pytest plugin that switches OnceOnly on in the OpenAI Agents SDK's own tests.

Loaded with ``-p once_only_agents_plugin`` (this folder on ``PYTHONPATH``): every run the tests
start (``Runner.run``, ``run_sync``, ``run_streamed``, which all go through the SDK's
``AgentRunner``) first has ``OnceOnly(run_id=...).wrap(...)`` applied to its starting agent, and
each test records in a fresh SQLite ledger of its own. Nothing else of the tests changes.

The tests give their runs no id, so each test's runs share one of its own (a run and its
resume must share it; a call repeated under it in a second run returns the recorded result).
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable
from typing import Any

import agents.run
import pytest
from plugin_ledger import _fresh_ledger  # noqa: F401  (an autouse fixture, by import)

from call4agents_openai_agents import OnceOnly

_run_id = ["suite"]  # the current test's


@pytest.fixture(autouse=True)
def _test_run_id() -> None:
    _run_id[0] = f"suite-{uuid.uuid4().hex}"


def _switched_on(method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def run(self: Any, starting_agent: Any, *args: Any, **kwargs: Any) -> Any:
        once = OnceOnly(run_id=lambda _: _run_id[0])
        return method(self, once.wrap(starting_agent), *args, **kwargs)

    return run


for _name in ("run", "run_sync", "run_streamed"):
    setattr(agents.run.AgentRunner, _name, _switched_on(getattr(agents.run.AgentRunner, _name)))
