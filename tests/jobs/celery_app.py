"""The Celery app the worker tests start: ``celery -A tests.jobs.celery_app worker``."""

from __future__ import annotations

import os
from typing import Any

from tests.jobs import jobs_tools
from tests.jobs.celery_conf import make_app

app = make_app(os.environ["C4A_JOBS_BROKER"], os.environ["C4A_JOBS_QUEUE"], jobs_tools.DIR)
if jobs_tools.ONCE:
    from call4agents_jobs.celery import OnceOnly

    OnceOnly(jobs_tools.ledger_setting()).install(app)


@app.task(
    bind=True,
    name="notify",
    acks_late=True,
    reject_on_worker_lost=True,
    autoretry_for=(Exception,),
    retry_kwargs={"countdown": 0, "max_retries": 2},
)
def notify(self: Any, to: str, pause: float = 0.0) -> str:
    return jobs_tools.job(to, pause)
