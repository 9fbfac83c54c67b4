"""Dramatiq with a real worker on the machine's RabbitMQ, killed with SIGKILL mid-message.

The worker process dies before it acknowledges the message, so RabbitMQ delivers it again to the
next worker, with the same message id. Emails are counted in a file outside the ledger.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dramatiq import Message
from dramatiq.brokers.rabbitmq import RabbitmqBroker
from dramatiq.common import dq_name, xq_name

from tests.jobs.jobs_tools import AFTER, INSIDE
from tests.jobs.workers import PATIENCE, RABBITMQ, Jobs, reachable

TO = "ann@example.com"


def _jobs(folder: Path, ledger: str = "") -> Iterator[Jobs]:
    jobs = Jobs(reachable(RABBITMQ), folder, ledger=ledger)
    try:
        yield jobs
    finally:
        jobs.stop()
        sender = RabbitmqBroker(url=jobs.broker)
        for name in (jobs.queue, dq_name(jobs.queue), xq_name(jobs.queue)):
            sender.channel.queue_delete(name)
        sender.close()


@pytest.fixture
def once(tmp_path: Path) -> Iterator[Jobs]:
    yield from _jobs(tmp_path, ledger=f"sqlite:///{tmp_path / 'ledger.db'}")


@pytest.fixture
def bare(tmp_path: Path) -> Iterator[Jobs]:
    yield from _jobs(tmp_path)


def send(jobs: Jobs, message: Message[Any] | None = None) -> Message[Any]:
    """Enqueue the job (or the same message again, keeping its id)."""
    sender = RabbitmqBroker(url=jobs.broker)
    sender.declare_queue(jobs.queue)
    message = message or Message(
        queue_name=jobs.queue, actor_name="notify", args=(TO,), kwargs={}, options={}
    )
    sender.enqueue(message)
    sender.close()
    return message


def outcomes(jobs: Jobs) -> list[dict[str, Any]]:
    path = jobs.folder / "outcomes"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def killed_and_redelivered(jobs: Jobs, crash: str) -> tuple[Message[Any], dict[str, Any]]:
    """Send a job that kills its worker at ``crash``; its outcome once RabbitMQ delivered it again
    to a fresh worker."""
    jobs.crash_at(crash)
    worker = jobs.dramatiq_worker()
    message = send(jobs)
    jobs.wait_until("the job's crash", lambda: jobs.crashed(crash))
    jobs.kill(worker)  # the rest of the worker; the killed process had not acknowledged it
    jobs.dramatiq_worker()
    jobs.wait_until("the redelivered job's outcome", lambda: bool(outcomes(jobs)))
    return message, outcomes(jobs)[0]


def test_a_redelivered_message_sends_its_email_once(once: Jobs) -> None:
    _, outcome = killed_and_redelivered(once, AFTER)
    assert outcome == {"error": None, "key": None, "result": f"sent to {TO}"}
    assert once.count("starts") == 2
    assert once.count("emails") == 1


def test_bare_the_redelivered_message_sends_it_again(bare: Jobs) -> None:
    _, outcome = killed_and_redelivered(bare, AFTER)
    assert outcome["error"] is None
    assert bare.count("emails") == 2


def test_in_doubt_fails_the_message_until_settled_then_a_redelivery_finishes_it(
    once: Jobs,
) -> None:
    message, outcome = killed_and_redelivered(once, INSIDE)
    assert outcome["error"] == "EffectInDoubt"
    assert once.count("emails") == 1

    settle = [sys.executable, "-m", "call4agents", "resolve", outcome["key"], "--happened"]
    settle += ["--result", f'"sent to {TO}"', "--url", once.ledger, "--by", "the test"]
    subprocess.run(settle, check=True, capture_output=True, timeout=PATIENCE)

    send(once, message)  # the same message again, under its own id
    once.wait_until("the settled job's outcome", lambda: len(outcomes(once)) >= 2)
    # Retries did not retry the in-doubt failure (max_retries=2 would have run it twice more):
    # the killed start, the in-doubt one, and the one after settling.
    assert [o["error"] for o in outcomes(once)] == ["EffectInDoubt", None]
    assert once.count("starts") == 3
    assert once.count("emails") == 1
