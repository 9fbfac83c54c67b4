"""The job queue examples run against the machine's brokers and say what the docs say."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import EXAMPLES, run_example
from tests.jobs.workers import RABBITMQ, reachable

JOBS = EXAMPLES / "jobs"


def test_celery_emails(tmp_path: Path) -> None:
    reachable("redis://127.0.0.1:6379/0")
    out = run_example(JOBS / "celery_emails.py", tmp_path)
    assert "same task id again: sent to ann@example.com (emails sent: 1)" in out
    assert "a new task id: sent to ann@example.com (emails sent: 2)" in out


def test_dramatiq_emails(tmp_path: Path) -> None:
    reachable(RABBITMQ)
    out = run_example(JOBS / "dramatiq_emails.py", tmp_path)
    assert "deliveries: 2, emails sent: 1" in out


def test_rq_emails(tmp_path: Path) -> None:
    reachable("redis://127.0.0.1:6379/0")
    out = run_example(JOBS / "rq_emails.py", tmp_path)
    assert "sent to ann@example.com (runs: 2, emails sent: 1)" in out
