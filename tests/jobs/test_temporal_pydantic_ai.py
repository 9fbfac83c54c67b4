"""A Pydantic AI agent made durable by Temporal (``TemporalDurability``, the successor of
``TemporalAgent``) on workers with ``call4agents_jobs.temporal.OnceOnly``: the worker killed with
SIGKILL in the tool's activity right after the tool acted, the activity retried on a second
worker, the emails counted in a file outside the ledger."""

from __future__ import annotations

import asyncio
import concurrent.futures
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from tests.conftest import Target
from tests.jobs.temporal_agent_app import CappedEmailAgent
from tests.jobs.temporal_app import Job, connect
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


async def _first_workflow_task_failure(
    client: Client, handle: WorkflowHandle[object, object]
) -> str:
    """The message and stack of the first failed workflow task in the workflow's history."""
    while True:
        async for event in handle.fetch_history_events():
            if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED:
                failure = event.workflow_task_failed_event_attributes.failure
                return f"{failure.message}\n{failure.stack_trace}"
        await asyncio.sleep(0.2)


def test_the_pydantic_ai_capability_cannot_run_in_temporal_workflow_code(
    temporal_server: str, tmp_path: Path
) -> None:
    """The capability's hooks run where the agent loop runs: in the workflow. Temporal's workflow
    event loop refuses the thread the ledger's I/O runs in, so the workflow task fails (and is
    retried without end) before the tool's activity is even scheduled."""
    emails = tmp_path / "emails.txt"
    queue = f"capped-{tmp_path.name[-8:]}"

    async def scenario() -> str:
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
                handle = await client.start_workflow(
                    CappedEmailAgent.run,
                    Job("bob@example.com", str(emails), "bare"),
                    id=queue,
                    task_queue=queue,
                )
                failure = await _first_workflow_task_failure(client, handle)
                await handle.terminate("the capability cannot run in workflow code")
        return failure

    failure = asyncio.run(scenario())
    assert "NotImplementedError" in failure
    assert "run_in_executor" in failure
    assert "call4agents_pydantic_ai" in failure
    assert not emails.exists()  # the tool never ran
