"""Celery with a real worker on the machine's RabbitMQ and Redis, killed with SIGKILL mid-job.

Tasks are ``acks_late`` with ``reject_on_worker_lost``, so the broker delivers a job again when
its worker dies: a prefork child killed (its parent requeues the task for a fresh child) or a solo
worker killed whole (the broker redelivers to the next worker: RabbitMQ when the connection
drops, Redis after its visibility timeout). Emails are counted in a file outside the ledger.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from celery.result import AsyncResult

import call4agents as c4a
from tests.conftest import Target
from tests.jobs.celery_conf import make_app
from tests.jobs.jobs_tools import AFTER, BEFORE_SEND, INSIDE
from tests.jobs.workers import PATIENCE, RABBITMQ, REDIS, Jobs, reachable

pytestmark = pytest.mark.slow  # worker processes killed and recovered: seconds a test
TO = "ann@example.com"


@pytest.fixture
def broker(request: pytest.FixtureRequest) -> str:
    """The broker a test names with ``@pytest.mark.parametrize("broker", ..., indirect=True)``."""
    return reachable(request.param)


# Each worker start costs seconds, so each case covers one broker and one pool, and together
# they cover both of each: a prefork child's death (its parent requeues the job), a solo
# worker's death (RabbitMQ redelivers when its connection drops, Redis after the visibility
# timeout).
CASES = pytest.mark.parametrize(
    ("broker", "pool"),
    [(RABBITMQ, "prefork"), (REDIS, "solo")],
    ids=["rabbitmq-prefork", "redis-solo"],
    indirect=["broker"],
)


def _jobs(broker: str, folder: Path, ledger: str = "", schema: str = "") -> Iterator[Jobs]:
    jobs = Jobs(broker, folder, ledger=ledger, schema=schema)
    client = make_app(broker, jobs.queue, folder)
    try:
        yield jobs
    finally:
        jobs.stop()
        with client.connection_for_write() as conn:
            conn.default_channel.queue_delete(jobs.queue)


@pytest.fixture
def once(broker: str, tmp_path: Path) -> Iterator[Jobs]:
    yield from _jobs(broker, tmp_path, ledger=f"sqlite:///{tmp_path / 'ledger.db'}")


@pytest.fixture
def bare(broker: str, tmp_path: Path) -> Iterator[Jobs]:
    yield from _jobs(broker, tmp_path)


def send(jobs: Jobs, task_id: str | None = None, pause: float = 0) -> Any:
    client = make_app(jobs.broker, jobs.queue, jobs.folder)
    return client.send_task("notify", (TO, pause), task_id=task_id)


def killed_and_redelivered(jobs: Jobs, pool: str, crash: str) -> Any:
    """Send a job that kills its worker at ``crash``; its outcome once the broker delivered it
    again to a fresh worker process."""
    jobs.crash_at(crash)
    worker = jobs.celery_worker(pool)
    result = send(jobs)
    if pool == "solo":  # the whole worker died with the job: start the next one
        jobs.wait_until("the worker's death", lambda: worker.poll() is not None)
        jobs.celery_worker(pool)
    result.get(timeout=PATIENCE, propagate=False)
    assert jobs.crashed(crash)
    return result


@CASES
def test_a_redelivered_task_sends_its_email_once(once: Jobs, pool: str) -> None:
    result = killed_and_redelivered(once, pool, AFTER)
    assert result.result == f"sent to {TO}"
    assert once.count("starts") == 2
    assert once.count("emails") == 1


@pytest.mark.parametrize(
    ("broker", "pool"), [(RABBITMQ, "solo")], ids=["rabbitmq-solo"], indirect=["broker"]
)
def test_bare_the_redelivered_task_sends_it_again(bare: Jobs, pool: str) -> None:
    result = killed_and_redelivered(bare, pool, AFTER)
    assert result.result == f"sent to {TO}"
    assert bare.count("emails") == 2


@pytest.mark.parametrize(
    ("broker", "pool", "crash", "verdict", "sent_before"),
    [
        (RABBITMQ, "solo", INSIDE, "--happened", 1),
        (REDIS, "prefork", BEFORE_SEND, "--did-not-happen", 0),
    ],
    ids=["rabbitmq-solo-happened", "redis-prefork-did-not-happen"],
    indirect=["broker"],
)
def test_in_doubt_fails_the_task_until_settled_then_a_redelivery_finishes_it(
    once: Jobs, pool: str, crash: str, verdict: str, sent_before: int
) -> None:
    result = killed_and_redelivered(once, pool, crash)
    error = result.result
    assert isinstance(error, c4a.EffectInDoubt), error  # whole, from the result backend
    assert error.key[:12] in str(error)
    assert error.run_id == f"celery-{result.id}"
    # autoretry_for=(Exception,) did not retry it: the killed start and the redelivery only.
    assert once.count("starts") == 2
    assert once.count("emails") == sent_before

    settle = [sys.executable, "-m", "call4agents", "resolve", error.key, verdict]
    settle += ["--url", once.ledger, "--by", "the test"]
    if verdict == "--happened":
        settle += ["--result", f'"sent to {TO}"']
    subprocess.run(settle, check=True, capture_output=True, timeout=PATIENCE)

    result.forget()
    again = send(once, task_id=result.id)  # the same job again, under its own id
    assert again.get(timeout=PATIENCE) == f"sent to {TO}"
    assert once.count("emails") == 1


@pytest.mark.postgres
def test_workers_racing_for_copies_of_one_job_on_postgres_send_once(
    pg_target: Target, tmp_path: Path
) -> None:
    broker = reachable(RABBITMQ)
    jobs = next(_jobs_pg := _jobs(broker, tmp_path, pg_target.url, pg_target.schema or ""))
    try:
        c4a.Ledger(pg_target.url, schema=pg_target.schema).close()  # tables made before the race
        for _ in range(3):
            jobs.celery_worker("solo")
        job = AsyncResult("job-1")
        for _ in range(3):  # copies of one job, as a broker redelivers it
            job = send(jobs, task_id=job.id, pause=1.0)
        jobs.wait_until("all three copies ending", lambda: jobs.count("ends") == 3)
        assert jobs.count("starts") == 3
        assert jobs.count("emails") == 1
    finally:
        next(_jobs_pg, None)
