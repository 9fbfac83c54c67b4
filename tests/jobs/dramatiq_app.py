"""The Dramatiq app the worker tests start: ``dramatiq tests.jobs.dramatiq_app``.

Besides the job, a test middleware writes each message's outcome to the folder's ``outcomes``
file: its error's type and action key, or none.
"""

from __future__ import annotations

import json
import os
from typing import Any

import dramatiq
from dramatiq.broker import Broker, MessageProxy
from dramatiq.brokers.rabbitmq import RabbitmqBroker
from dramatiq.middleware import Middleware

from tests.jobs import jobs_tools


class Outcomes(Middleware):
    def after_process_message(
        self,
        broker: Broker,
        message: MessageProxy,
        *,
        result: Any = None,
        exception: BaseException | None = None,
    ) -> None:
        error = type(exception).__name__ if exception is not None else None
        outcome = {"error": error, "key": getattr(exception, "key", None), "result": result}
        jobs_tools.note("outcomes", json.dumps(outcome))


broker = RabbitmqBroker(url=os.environ["C4A_JOBS_BROKER"])
broker.add_middleware(Outcomes())
if jobs_tools.ONCE:
    from call4agents_jobs.dramatiq import OnceOnly

    broker.add_middleware(OnceOnly(jobs_tools.ledger_setting()))
dramatiq.set_broker(broker)


@dramatiq.actor(
    actor_name="notify",
    queue_name=os.environ["C4A_JOBS_QUEUE"],
    max_retries=2,
    min_backoff=10,
    max_backoff=50,
)
def notify(to: str, pause: float = 0.0) -> str:
    return jobs_tools.job(to, pause)
