"""A Temporal worker for ``temporal_app`` (or, with APP ``agent``, ``temporal_agent_app``), run as
a child process: ``ADDRESS QUEUE MODE [APP]``.

MODE ``once`` runs it with ``call4agents_jobs.temporal.OnceOnly`` over the ledger at
``$C4A_TEST_URL``, ``bare`` without. It works until the activity it runs kills it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import sys

import call4agents as c4a
from tests.jobs.temporal_app import connect, worker

ADDRESS, QUEUE, MODE = sys.argv[1:4]
APP = sys.argv[4] if len(sys.argv) > 4 else "notify"


async def main() -> None:
    client = await connect(ADDRESS, APP)
    ledger = c4a.init(os.environ["C4A_TEST_URL"]) if MODE == "once" else None
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        await worker(client, QUEUE, APP, ledger, pool).run()


asyncio.run(main())
