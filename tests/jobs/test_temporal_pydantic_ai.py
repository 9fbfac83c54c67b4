"""A Pydantic AI agent made durable by Temporal (``TemporalDurability``, the successor of
``TemporalAgent``) on workers with ``call4agents_jobs.temporal.OnceOnly``: the worker killed with
SIGKILL in the tool's activity right after the tool acted, the activity retried on a second
worker, the emails counted in a file outside the ledger."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.conftest import Target
from tests.jobs.test_temporal import Cluster


@pytest.mark.parametrize(
    ("mode", "emails"),
    [
        ("bare", 2),  # the retried tool activity sends it again
        ("once", 1),  # the tool under @c4a.effect, in the activity's run: the recorded result
    ],
)
def test_a_durable_agent_whose_worker_died_after_its_tool_acted(
    temporal_server: str, sqlite_target: Target, tmp_path: Path, mode: str, emails: int
) -> None:
    cluster = Cluster(temporal_server, sqlite_target, tmp_path, mode, app="agent")
    assert asyncio.run(cluster.kill_and_retry("after")) == "Done: sent to bob@example.com"
    assert cluster.sent() == emails
