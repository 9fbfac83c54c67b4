"""An RQ job that sends an email once, however often it runs under its id.

Run it with Redis on 127.0.0.1:6379 (or set REDIS_URL): ``python rq_emails.py``. It enqueues a
job, runs a burst worker with the OnceOnly job class, enqueues the same job (same id) again, as a
retry does, and runs the worker again.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

from redis import Redis
from rq import Queue

import call4agents as c4a

# The worker this script starts inherits these: the same ledger and outbox.
os.environ.setdefault("CALL4AGENTS_URL", f"sqlite:///{Path('.c4a/ledger.db').resolve()}")
os.environ.setdefault("OUTBOX", str(Path("outbox.txt").resolve()))


@c4a.effect
def send_email(to: str, body: str) -> str:
    with open(os.environ["OUTBOX"], "a") as outbox:
        outbox.write(f"{to}: {body}\n")
    return f"sent to {to}"


def welcome(to: str) -> str:
    with open(os.environ["OUTBOX"] + ".runs", "a") as runs:
        runs.write("ran\n")
    return send_email(to, "Welcome aboard!")


def work(url: str, queue: str) -> None:
    """A burst worker, as `rq worker --burst --job-class call4agents_jobs.rq.OnceOnly` runs it."""
    worker = [sys.executable, "-m", "rq.cli", "worker", "--burst", "--url", url, "--job-class",
              "call4agents_jobs.rq.OnceOnly", queue]  # fmt: skip
    subprocess.run(worker, cwd=Path(__file__).parent, check=True, capture_output=True)


if __name__ == "__main__":
    url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    queue = Queue(f"emails-{uuid.uuid4().hex[:8]}", connection=Redis.from_url(url))
    try:
        job = queue.enqueue("rq_emails.welcome", "ann@example.com")
        work(url, queue.name)
        queue.enqueue_job(job)  # the same job, with the same id, run again
        work(url, queue.name)
        job.refresh()
        emails = len(Path(os.environ["OUTBOX"]).read_text().splitlines())
        runs = len(Path(os.environ["OUTBOX"] + ".runs").read_text().splitlines())
        print(f"{job.return_value()} (runs: {runs}, emails sent: {emails})")
    finally:
        queue.delete(delete_jobs=True)
