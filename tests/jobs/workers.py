"""Real brokers and real worker processes for the job queue tests.

Each test gets its own queue name, a folder that counts emails and job starts outside the ledger,
and workers started as a user starts them (``celery worker``, ``dramatiq``), each in a session of
its own so that the test can SIGKILL a whole worker.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.postgres.helpers import unavailable

ROOT = Path(__file__).parents[2]
RABBITMQ = "amqp://guest:guest@127.0.0.1:5672/%2F"  # the default vhost, "/"
REDIS = "redis://127.0.0.1:6379/11"
# A loaded machine takes seconds to start a worker and to redeliver; this bound only turns a hang
# into a failure.
PATIENCE = 120.0


def reachable(url: str) -> str:
    """The broker's URL if something listens there, else skip (fail under CI=true)."""
    where = urlsplit(url)
    try:
        socket.create_connection((where.hostname, where.port), timeout=5).close()
    except OSError as exc:
        unavailable(f"no broker at {where.hostname}:{where.port} ({exc}); .ci/run starts one")
    return url


@dataclass
class Jobs:
    """One test's queue, its counting folder, and the workers it started."""

    broker: str
    folder: Path
    ledger: str = ""  # empty: the workers run bare, without Call4Agents
    schema: str = ""
    queue: str = field(default_factory=lambda: f"c4a-test-{uuid.uuid4().hex[:12]}")
    workers: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def env(self) -> dict[str, str]:
        return dict(
            os.environ,
            C4A_JOBS_BROKER=self.broker,
            C4A_JOBS_QUEUE=self.queue,
            C4A_JOBS_DIR=str(self.folder),
            C4A_JOBS_LEDGER=self.ledger,
            C4A_JOBS_SCHEMA=self.schema,
            CALL4AGENTS_URL=self.ledger,  # the default ledger, for RQ's job class
            PYTHONPATH=str(ROOT),
        )

    def start(self, *argv: str) -> subprocess.Popen[bytes]:
        """``python -m argv...`` as a worker, its output in a log file in the folder."""
        with (self.folder / f"worker-{len(self.workers)}.log").open("wb") as log:
            worker = subprocess.Popen(
                [sys.executable, "-m", *argv],
                cwd=ROOT,
                env=self.env(),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.workers.append(worker)
        return worker

    def celery_worker(self, pool: str, concurrency: int = 1) -> subprocess.Popen[bytes]:
        # A name of its own, as each worker of a deployment has: under the default one (celery@
        # the host), a second worker on RabbitMQ failed to declare the name's exclusive
        # remote-control queue while another test's worker held it, and never took a job.
        name = f"w{len(self.workers)}-{self.queue}@%h"
        return self.start(
            "celery", "-A", "tests.jobs.celery_app", "worker", "-P", pool, "-n", name,
            "-c", str(concurrency), "-Q", self.queue, "-l", "info",
            "--without-heartbeat", "--without-mingle", "--without-gossip",
        )  # fmt: skip

    def dramatiq_worker(self) -> subprocess.Popen[bytes]:
        return self.start(
            "dramatiq", "tests.jobs.dramatiq_app", "--processes", "1", "--threads", "1",
            "--queues", self.queue,
        )  # fmt: skip

    def rq_worker(self) -> subprocess.Popen[bytes]:
        """A burst worker: it ends when the queue is empty (retries included)."""
        job_class = ["--job-class", "call4agents_jobs.rq.OnceOnly"] if self.ledger else []
        return self.start(
            "rq.cli", "worker", "--burst", "--url", self.broker, *job_class, self.queue
        )

    def count(self, name: str) -> int:
        """Lines in a counting file: ``emails`` sent, job ``starts``."""
        path = self.folder / name
        return len(path.read_text().splitlines()) if path.exists() else 0

    def crash_at(self, where: str) -> None:
        """The next job to reach ``where`` (see ``jobs_tools``) kills its worker there."""
        (self.folder / "crash").write_text(where)

    def crashed(self, where: str) -> bool:
        return (self.folder / f"crashed-{where}").exists()

    def wait_until(self, what: str, check: Callable[[], bool]) -> None:
        deadline = time.monotonic() + PATIENCE
        while not check():
            if time.monotonic() > deadline:
                pytest.fail(f"{what} never happened; the workers said:\n{self.logs()}")
            time.sleep(0.05)

    def logs(self) -> str:
        return "\n".join(p.read_text(errors="replace") for p in sorted(self.folder.glob("*.log")))

    def kill(self, worker: subprocess.Popen[bytes]) -> None:
        """SIGKILL the worker and every process it started (what is left of it)."""
        with contextlib.suppress(ProcessLookupError):  # its session is already gone
            os.killpg(worker.pid, signal.SIGKILL)
        worker.wait()

    def stop(self) -> None:
        for worker in self.workers:
            self.kill(worker)
