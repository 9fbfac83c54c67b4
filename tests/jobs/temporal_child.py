"""A Temporal worker for ``temporal_app``, run as a child process: ``ADDRESS QUEUE MODE``.

MODE ``once`` runs it with ``call4agents_jobs.temporal.OnceOnly`` over the ledger at
``$C4A_TEST_URL``, ``bare`` without. It works until the activity it runs kills it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import sys

from temporalio.client import Client
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

import call4agents as c4a
from call4agents_jobs.temporal import OnceOnly
from tests.jobs.temporal_app import Notify, send

ADDRESS, QUEUE, MODE = sys.argv[1:4]


async def main() -> None:
    client = await Client.connect(ADDRESS)
    interceptors = [OnceOnly(ledger=c4a.init(os.environ["C4A_TEST_URL"]))] if MODE == "once" else []
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        worker = Worker(
            client,
            task_queue=QUEUE,
            workflows=[Notify],
            activities=[send],
            activity_executor=pool,
            interceptors=interceptors,
            workflow_runner=UnsandboxedWorkflowRunner(),
        )
        await worker.run()


asyncio.run(main())
