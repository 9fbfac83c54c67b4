"""A Temporal workflow that sends one email from a sync activity, for the Temporal tests.

The activity's arguments say where emails are counted, whether the email is an ``@c4a.effect``
tool (``once``) or a plain function (``bare``), and where its first attempt dies by SIGKILL:
``after`` the tool returned, ``inside`` the tool once the email went out, or ``none``. Later
attempts (a retry on another worker) never die.
"""

from __future__ import annotations

import concurrent.futures
import os
import signal
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.common import RetryPolicy
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

import call4agents as c4a
from call4agents.integration import LedgerCore
from call4agents_jobs.temporal import OnceOnly

STICKY_WAIT = timedelta(seconds=1)


@dataclass
class Job:
    to: str
    emails: str
    mode: str = "once"
    kill: str = "none"


def _die_on_first_attempt(job: Job, point: str) -> None:
    if job.kill == point and activity.info().attempt == 1:
        os.kill(os.getpid(), signal.SIGKILL)


def deliver(to: str, job: Job) -> str:
    with Path(job.emails).open("a") as f:
        f.write(to + "\n")
    _die_on_first_attempt(job, "inside")
    return f"sent to {to}"


send_email = c4a.effect(ignore=("job",))(deliver)


@activity.defn
def send(job: Job) -> str:
    # A heartbeat at the start: a worker killed from here on is noticed by its heartbeat timeout.
    activity.heartbeat()
    sent = send_email(job.to, job) if job.mode == "once" else deliver(job.to, job)
    _die_on_first_attempt(job, "after")
    return sent


@workflow.defn
class Notify:
    @workflow.run
    async def run(self, job: Job) -> str:
        return await workflow.execute_activity(
            send,
            job,
            start_to_close_timeout=timedelta(minutes=5),
            heartbeat_timeout=timedelta(seconds=3),
            retry_policy=RetryPolicy(
                initial_interval=timedelta(milliseconds=200),
                backoff_coefficient=1.0,
                maximum_interval=timedelta(milliseconds=200),
            ),
        )


@activity.defn
def hand_over(reason: str) -> str:
    c4a.escalate(reason)


@workflow.defn
class HandOver:
    @workflow.run
    async def run(self, reason: str) -> str:
        return await workflow.execute_activity(
            hand_over,
            reason,
            start_to_close_timeout=timedelta(minutes=5),
            # Three attempts at most, so that a retryable failure ends the test too.
            retry_policy=RetryPolicy(
                initial_interval=timedelta(milliseconds=200), maximum_attempts=3
            ),
        )


async def connect(address: str, app: str) -> Client:
    """A client for ``app``: ``notify`` (``Notify``) or ``agent`` (the Pydantic AI agent, whose
    plugin sets the client's data converter and registers the agent's activities)."""
    if app == "agent":
        from pydantic_ai.durable_exec.temporal import PydanticAIPlugin

        return await Client.connect(address, plugins=[PydanticAIPlugin()])
    return await Client.connect(address)


def worker(
    client: Client,
    queue: str,
    app: str,
    ledger: LedgerCore | None,
    pool: concurrent.futures.ThreadPoolExecutor,
) -> Worker:
    """A worker of ``app`` on ``queue``: with ``OnceOnly`` over ``ledger``, or bare without one."""
    if app == "agent":
        from tests.jobs.temporal_agent_app import EmailAgent

        workflows: list[type] = [EmailAgent]
        activities: list[object] = []  # the plugin adds the agent's
    else:
        workflows, activities = [Notify], [send]
    return Worker(
        client,
        task_queue=queue,
        workflows=workflows,
        activities=activities,
        activity_executor=pool,
        interceptors=[OnceOnly(ledger=ledger)] if ledger is not None else [],
        workflow_runner=UnsandboxedWorkflowRunner(),
        # A worker keeps its workflows' next tasks on a queue of its own; when it was killed,
        # Temporal hands such a task to another worker once this wait ends (10 s by default,
        # which every killed-worker test waited out before its workflow could finish).
        sticky_queue_schedule_to_start_timeout=STICKY_WAIT,
    )
