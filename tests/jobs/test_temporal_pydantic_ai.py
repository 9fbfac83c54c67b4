"""A Pydantic AI agent made durable by Temporal (``TemporalDurability``, the successor of
``TemporalAgent``) on workers with ``call4agents_jobs.temporal.OnceOnly``: the worker killed with
SIGKILL in the tool's activity right after the tool acted, the activity retried on a second
worker, the emails counted in a file outside the ledger."""

from __future__ import annotations

import asyncio
import concurrent.futures
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio.client import WorkflowFailureError
from temporalio.exceptions import ApplicationError
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from tests.conftest import Target
from tests.jobs.temporal_agent_app import CappedEmailAgent
from tests.jobs.temporal_app import Job, connect
from tests.jobs.test_temporal import Cluster

pytestmark = pytest.mark.slow  # worker processes killed and recovered: seconds a test


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


def test_the_pydantic_ai_capability_refuses_temporal_workflow_code_in_one_line(
    temporal_server: str, tmp_path: Path
) -> None:
    """The capability's hooks run where the agent loop runs: in the workflow, which must not do
    I/O (Temporal refuses the ledger's threads there). The capability says so, and Pydantic AI's
    plugin fails the workflow with it, before the tool's activity is even scheduled."""
    emails = tmp_path / "emails.txt"
    queue = f"capped-{tmp_path.name[-8:]}"

    async def scenario() -> BaseException | None:
        client = await connect(temporal_server, "agent")
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            worker = Worker(
                client,
                task_queue=queue,
                workflows=[CappedEmailAgent],
                activity_executor=pool,
                workflow_runner=UnsandboxedWorkflowRunner(),
            )
            async with worker:
                with pytest.raises(WorkflowFailureError) as failed:
                    await client.execute_workflow(
                        CappedEmailAgent.run,
                        Job("bob@example.com", str(emails), "bare"),
                        id=queue,
                        task_queue=queue,
                        # Only so that a workflow task failing without end ends the test too.
                        execution_timeout=timedelta(minutes=5),
                    )
        return failed.value.cause

    cause = asyncio.run(scenario())
    assert isinstance(cause, ApplicationError), cause
    assert cause.type == "UserError"
    assert "call4agents_pydantic_ai.OnceOnly cannot run in a Temporal workflow" in cause.message
    assert "call4agents_jobs.temporal.OnceOnly" in cause.message
    assert not emails.exists()  # the tool never ran
