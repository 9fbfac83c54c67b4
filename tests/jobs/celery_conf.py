"""The Celery app's settings, shared by the worker (``celery_app``) and the test that sends it
jobs: results go to files, pickled, so an error comes back with its type and attributes."""

from __future__ import annotations

from pathlib import Path

from celery import Celery


def make_app(broker: str, queue: str, folder: Path) -> Celery:
    app = Celery("c4a_jobs_test", broker=broker)
    results = folder / "results"
    results.mkdir(exist_ok=True)
    app.conf.update(
        result_backend=f"file://{results}",
        result_serializer="pickle",
        result_accept_content=["json", "pickle"],
        task_default_queue=queue,
        broker_transport_options={
            "visibility_timeout": 2,  # Redis redelivers an unacknowledged job after this
            # A worker looks for such jobs when it starts and then, by default, every 100 s (10 s
            # times a scan every tenth look): a worker started within the 2 s found nothing and
            # the job waited that long. Each second instead.
            "unacked_restore_interval": 1,
            "unacked_restore_throttle": 1,
        },
        broker_connection_retry_on_startup=True,
        worker_prefetch_multiplier=1,
        worker_hijack_root_logger=False,
    )
    return app
