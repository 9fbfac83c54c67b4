"""Temporal activities under ``call4agents_jobs.temporal.OnceOnly``: a worker killed with SIGKILL
after the tool acted, or inside it, and the activity retried on another worker.

The first worker is a child process; the worker that takes the retry runs in the test's process.
Emails are counted in a file outside the ledger.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.exceptions import ApplicationError
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from call4agents_jobs.temporal import OnceOnly
from tests.conftest import Target, run_child
from tests.jobs.temporal_app import HandOver, Job, connect, hand_over, worker

pytestmark = pytest.mark.slow  # worker processes killed and recovered: seconds a test
CHILD = Path(__file__).with_name("temporal_child.py")


class Cluster:
    """One task queue on the session's server, a ledger, and a file of emails.

    ``app`` is what the workers run: ``notify`` (the ``Notify`` workflow) or ``agent`` (the
    Pydantic AI agent of ``temporal_agent_app``).
    """

    def __init__(
        self, address: str, target: Target, tmp_path: Path, mode: str, app: str = "notify"
    ) -> None:
        self.address, self.target, self.mode, self.app = address, target, mode, app
        self.queue = f"emails-{uuid.uuid4().hex[:8]}"
        self.emails = tmp_path / "emails.txt"
        self.ledger = target.open()

    def job(self, kill: str) -> Job:
        return Job("bob@example.com", str(self.emails), self.mode, kill)

    def sent(self) -> int:
        return len(self.emails.read_text().splitlines()) if self.emails.exists() else 0

    async def client(self) -> Client:
        return await connect(self.address, self.app)

    def worker(self, client: Client, pool: concurrent.futures.ThreadPoolExecutor) -> Worker:
        """The second worker, in this process, with or without OnceOnly as the mode says."""
        ledger = self.ledger if self.mode == "once" else None
        return worker(client, self.queue, self.app, ledger, pool)

    async def start_and_kill_first_worker(self, client: Client, kill: str) -> str:
        """Start the workflow, and run the first worker until its activity kills it."""
        workflow_id = f"{self.app}-{uuid.uuid4().hex[:8]}"
        await client.start_workflow(
            self.workflow(), self.job(kill), id=workflow_id, task_queue=self.queue
        )
        done = await asyncio.to_thread(
            run_child,
            CHILD,
            self.address,
            self.queue,
            self.mode,
            self.app,
            env=self.target.env(),
            timeout=120,
        )
        assert done.returncode == -signal.SIGKILL, done.stderr
        return workflow_id

    def workflow(self) -> str:
        """The workflow type the app's workers run."""
        return "EmailAgent" if self.app == "agent" else "Notify"

    async def kill_and_retry(self, kill: str) -> str:
        """The first worker killed at ``kill`` in its activity; the workflow's result, once a
        second worker took the retry and finished it."""
        client = await self.client()
        workflow_id = await self.start_and_kill_first_worker(client, kill)
        assert self.sent() == 1
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            async with self.worker(client, pool):
                result: str = await client.get_workflow_handle(workflow_id).result()
                return result


@pytest.mark.parametrize(("mode", "emails"), [("bare", 2), ("once", 1)])
def test_a_worker_killed_after_the_tool_acted_and_the_retry_sends_nothing_more(
    temporal_server: str, sqlite_target: Target, tmp_path: Path, mode: str, emails: int
) -> None:
    cluster = Cluster(temporal_server, sqlite_target, tmp_path, mode)
    assert asyncio.run(cluster.kill_and_retry("after")) == "sent to bob@example.com"
    assert cluster.sent() == emails


async def _activity_failure(
    client: Client, handle: WorkflowHandle[object, object]
) -> ApplicationError:
    """The first failure of the workflow's pending activity raised by the activity itself (not
    the heartbeat timeout that noticed the dead worker): Temporal shows it while it waits to
    retry."""
    while True:
        described = await handle.describe()
        for pending in described.raw_description.pending_activities:
            if pending.HasField("last_failure"):
                failure = await client.data_converter.decode_failure(pending.last_failure)
                if isinstance(failure, ApplicationError):
                    return failure
        await asyncio.sleep(0.1)


def resolve(target: Target, key: str, verdict: str) -> None:
    """A person settles the action with the real command."""
    command = Path(sys.executable).with_name("call4agents")
    done = subprocess.run(
        [str(command), "resolve", key[:12], verdict, "--by", "ann", "--url", target.url],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_worker_killed_inside_the_tool_leaves_the_activity_in_doubt_until_settled(
    temporal_server: str, sqlite_target: Target, tmp_path: Path
) -> None:
    cluster = Cluster(temporal_server, sqlite_target, tmp_path, "once")

    async def scenario() -> object:
        client = await cluster.client()
        workflow_id = await cluster.start_and_kill_first_worker(client, "inside")
        handle = client.get_workflow_handle(workflow_id)
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            async with cluster.worker(client, pool):
                failure = await _activity_failure(client, handle)
                assert failure.type == "EffectInDoubt"
                [doubt] = cluster.ledger.in_doubt()
                action = {"key": doubt.key, "run_id": doubt.run_id, "tool": doubt.tool}
                assert failure.details == (action,)
                assert doubt.key[:12] in failure.message
                await asyncio.to_thread(resolve, cluster.target, doubt.key, "--happened")
                return await handle.result()

    assert asyncio.run(scenario()) is None  # settled as sent, with no result recorded
    assert cluster.sent() == 1


def test_an_escalation_fails_the_activity_for_good_typed_by_its_class(
    temporal_server: str, sqlite_target: Target
) -> None:
    ledger = sqlite_target.open()
    queue = f"hand-over-{uuid.uuid4().hex[:8]}"

    async def scenario() -> BaseException:
        client = await Client.connect(temporal_server)
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            worker = Worker(
                client,
                task_queue=queue,
                workflows=[HandOver],
                activities=[hand_over],
                activity_executor=pool,
                interceptors=[OnceOnly(ledger=ledger)],
                workflow_runner=UnsandboxedWorkflowRunner(),
            )
            async with worker:
                run = client.execute_workflow(
                    HandOver.run, "the customer asked for a manager", id=queue, task_queue=queue
                )
                with pytest.raises(WorkflowFailureError) as failed:
                    await run
        return failed.value.cause

    activity_error = asyncio.run(scenario())
    cause = activity_error.__cause__
    assert isinstance(cause, ApplicationError), activity_error
    assert cause.type == "Escalated"
    assert cause.non_retryable  # not retried: an escalation does not change by retrying
    assert "the customer asked for a manager" in cause.message
