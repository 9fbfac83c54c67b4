"""A Celery task that sends an email once, however often the broker delivers it.

Run it with Redis on 127.0.0.1:6379 (or set BROKER_URL): ``python celery_emails.py``. It starts a
worker, sends the task, then sends the same task again under the same id, as a broker does after a
worker dies; then it sends it once more under a new id, which is a new job.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

from celery import Celery

import call4agents as c4a
from call4agents_jobs.celery import OnceOnly

# The worker this script starts inherits these: the same ledger, outbox and queue.
os.environ.setdefault("CALL4AGENTS_URL", f"sqlite:///{Path('.c4a/ledger.db').resolve()}")
os.environ.setdefault("OUTBOX", str(Path("outbox.txt").resolve()))
os.environ.setdefault("EXAMPLE_QUEUE", f"emails-{uuid.uuid4().hex[:8]}")
BROKER = os.environ.get("BROKER_URL", "redis://127.0.0.1:6379/0")

app = Celery("celery_emails", broker=BROKER, backend=BROKER)
app.conf.task_default_queue = os.environ["EXAMPLE_QUEUE"]
OnceOnly().install(app)


@c4a.effect
def send_email(to: str, body: str) -> str:
    with open(os.environ["OUTBOX"], "a") as outbox:
        outbox.write(f"{to}: {body}\n")
    return f"sent to {to}"


@app.task(acks_late=True, reject_on_worker_lost=True)
def welcome(to: str) -> str:
    return send_email(to, "Welcome aboard!")


def emails() -> int:
    return len(Path(os.environ["OUTBOX"]).read_text().splitlines())


if __name__ == "__main__":
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "celery_emails", "worker", "-P", "solo",
         "--without-heartbeat", "--without-mingle", "--without-gossip", "-l", "warning"],
        cwd=Path(__file__).parent,
    )  # fmt: skip
    try:
        job = welcome.delay("ann@example.com")
        print("first delivery:", job.get(timeout=120))
        job.forget()
        again = welcome.apply_async(("ann@example.com",), task_id=job.id)
        print("same task id again:", again.get(timeout=120), f"(emails sent: {emails()})")
        new = welcome.delay("ann@example.com")
        print("a new task id:", new.get(timeout=120), f"(emails sent: {emails()})")
    finally:
        worker.terminate()
        worker.wait()
