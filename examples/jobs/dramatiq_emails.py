"""A Dramatiq actor that sends an email once, however often the broker delivers its message.

Run it with RabbitMQ on 127.0.0.1:5672 (or set BROKER_URL): ``python dramatiq_emails.py``. It
starts a worker, sends a message, then enqueues the same message again, as RabbitMQ does after a
worker dies before acknowledging it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import dramatiq
from dramatiq.brokers.rabbitmq import RabbitmqBroker

import call4agents as c4a
from call4agents_jobs.dramatiq import OnceOnly

# The worker this script starts inherits these: the same ledger, outbox and queue.
os.environ.setdefault("CALL4AGENTS_URL", f"sqlite:///{Path('.c4a/ledger.db').resolve()}")
os.environ.setdefault("OUTBOX", str(Path("outbox.txt").resolve()))
os.environ.setdefault("EXAMPLE_QUEUE", f"emails-{uuid.uuid4().hex[:8]}")

broker = RabbitmqBroker(url=os.environ.get("BROKER_URL", "amqp://guest:guest@127.0.0.1:5672/%2F"))
broker.add_middleware(OnceOnly())
dramatiq.set_broker(broker)


@c4a.effect
def send_email(to: str, body: str) -> str:
    with open(os.environ["OUTBOX"], "a") as outbox:
        outbox.write(f"{to}: {body}\n")
    return f"sent to {to}"


@dramatiq.actor(queue_name=os.environ["EXAMPLE_QUEUE"])
def welcome(to: str) -> None:
    send_email(to, "Welcome aboard!")
    with open(os.environ["OUTBOX"] + ".deliveries", "a") as deliveries:
        deliveries.write("delivered\n")


def count(path: str) -> int:
    return len(Path(path).read_text().splitlines()) if Path(path).exists() else 0


def wait_for_deliveries(n: int) -> None:
    deadline = time.monotonic() + 120
    while count(os.environ["OUTBOX"] + ".deliveries") < n:
        if time.monotonic() > deadline:
            raise SystemExit("the worker did not process the message")
        time.sleep(0.1)


if __name__ == "__main__":
    worker = subprocess.Popen(
        [sys.executable, "-m", "dramatiq", "dramatiq_emails", "--processes", "1",
         "--threads", "1", "--queues", os.environ["EXAMPLE_QUEUE"]],
        cwd=Path(__file__).parent,
    )  # fmt: skip
    try:
        message = welcome.send("ann@example.com")
        wait_for_deliveries(1)
        broker.enqueue(message)  # the same message, with the same id, delivered again
        wait_for_deliveries(2)
        print(f"deliveries: 2, emails sent: {count(os.environ['OUTBOX'])}")
    finally:
        worker.terminate()
        worker.wait()
        for name in (message.queue_name, f"{message.queue_name}.DQ", f"{message.queue_name}.XQ"):
            broker.channel.queue_delete(name)
