"""RQ with a real worker on the machine's Redis, its work horse killed with SIGKILL mid-job.

RQ runs each job in a work horse forked from the worker; when the horse dies, the worker fails the
job and, with ``Retry(max=...)``, enqueues it again under the same id. Emails are counted in a
file outside the ledger.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis import Redis
from rq import Queue, Retry
from rq.job import Job

from tests.jobs.jobs_tools import AFTER, INSIDE
from tests.jobs.workers import PATIENCE, REDIS, Jobs, reachable

TO = "ann@example.com"


def _jobs(folder: Path, ledger: str = "") -> Iterator[Jobs]:
    jobs = Jobs(reachable(REDIS), folder, ledger=ledger)
    try:
        yield jobs
    finally:
        jobs.stop()
        Queue(jobs.queue, connection=Redis.from_url(jobs.broker)).delete(delete_jobs=True)


@pytest.fixture
def once(tmp_path: Path) -> Iterator[Jobs]:
    yield from _jobs(tmp_path, ledger=f"sqlite:///{tmp_path / 'ledger.db'}")


@pytest.fixture
def bare(tmp_path: Path) -> Iterator[Jobs]:
    yield from _jobs(tmp_path)


def killed_and_retried(jobs: Jobs, crash: str) -> Job:
    """Enqueue a job whose work horse dies at ``crash``; the job once RQ retried it and the burst
    worker ended."""
    jobs.crash_at(crash)
    queue = Queue(jobs.queue, connection=Redis.from_url(jobs.broker))
    job = queue.enqueue("tests.jobs.jobs_tools.job", TO, retry=Retry(max=2))
    worker = jobs.rq_worker()
    assert worker.wait(timeout=PATIENCE) == 0, jobs.logs()
    assert jobs.crashed(crash)
    job.refresh()
    return job


def test_a_retried_job_sends_its_email_once(once: Jobs) -> None:
    job = killed_and_retried(once, AFTER)
    assert job.is_finished
    assert job.return_value() == f"sent to {TO}"
    assert once.count("starts") == 2
    assert once.count("emails") == 1


def test_bare_the_retried_job_sends_it_again(bare: Jobs) -> None:
    job = killed_and_retried(bare, AFTER)
    assert job.is_finished
    assert bare.count("emails") == 2


def test_in_doubt_fails_the_job_until_settled_then_a_requeue_finishes_it(once: Jobs) -> None:
    job = killed_and_retried(once, INSIDE)
    assert job.is_failed
    failure = job.latest_result()
    assert failure is not None
    assert "EffectInDoubt" in (failure.exc_string or "")
    # Not retried although one retry was left: the killed start and the in-doubt one.
    assert once.count("starts") == 2
    assert once.count("emails") == 1
    key_prefix = failure.exc_string.split("call4agents resolve ", 1)[1].split()[0]

    settle = [sys.executable, "-m", "call4agents", "resolve", key_prefix, "--happened"]
    settle += ["--result", f'"sent to {TO}"', "--url", once.ledger, "--by", "the test"]
    subprocess.run(settle, check=True, capture_output=True, timeout=PATIENCE)

    job.requeue()  # the same job, under its own id
    assert once.rq_worker().wait(timeout=PATIENCE) == 0, once.logs()
    job.refresh()
    assert job.is_finished
    assert job.return_value() == f"sent to {TO}"
    assert once.count("emails") == 1
