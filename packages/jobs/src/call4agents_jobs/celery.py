"""Once-only side effects under Celery, in one line::

    from call4agents_jobs.celery import OnceOnly

    OnceOnly().install(app)

Every task then runs inside ``c4a.run("celery-<task id>")``. Celery keeps a task's id when the
broker delivers it again (``acks_late`` with a lost worker, a Redis visibility timeout) and when
the task retries, so a tool under ``@c4a.effect`` acts once however often the task runs. A task
sent again by hand (``.delay()`` a second time) has a new id and is a new job.

A task whose action is in doubt fails with ``c4a.EffectInDoubt`` instead of being retried by
``autoretry_for`` or ``self.retry()``: each retry would only raise it again. Settle the action
with ``call4agents resolve KEY --happened`` (or ``--did-not-happen``), then send the task again
with its own id (``task.apply_async(args, task_id=failed_id)``) to finish it.
"""

from __future__ import annotations

_FIX = 'pip install "call4agents-jobs[celery]"'

try:
    import celery
except ImportError as exc:  # pragma: no cover - exercised only without the engine
    raise ImportError(f"call4agents_jobs.celery needs Celery 5.4 or later: {_FIX}") from exc

import sys  # noqa: E402  (only after the engine check above)
from collections.abc import Callable, Iterable  # noqa: E402
from typing import Any  # noqa: E402

from celery.app.annotations import prepare  # noqa: E402

from call4agents import ConfigurationError  # noqa: E402

from ._jobs import JobRuns, LedgerSetting, in_doubt  # noqa: E402

__all__ = ["OnceOnly"]

Method = Callable[..., Any]


class OnceOnly:
    """Runs every task of a Celery app inside the run named by its task id.

    Args:
        ledger: a ledger URL (each worker process opens it on its first task), an open
            ``c4a.Ledger``, or None for the worker's default ledger (``$CALL4AGENTS_URL``).
        run_prefix: put before the task id to name the run.
    """

    def __init__(self, ledger: LedgerSetting = None, *, run_prefix: str = "celery-") -> None:
        self._runs = JobRuns("OnceOnly", ledger, run_prefix)

    def install(self, app: celery.Celery) -> celery.Celery:
        """Attach to ``app`` through its task annotations; call it before the app's tasks are
        used (right after creating the app). Returns the app."""
        if not isinstance(app, celery.Celery):
            raise ConfigurationError(
                f"OnceOnly().install(app) takes a celery.Celery app; got {type(app).__name__}"
            )
        if app.finalized:
            raise ConfigurationError(
                "OnceOnly().install(app) came after the app's tasks were set up, so they would "
                "run without it: call it right after creating the app"
            )
        existing = app.conf.task_annotations or []
        theirs = list(existing) if isinstance(existing, (list, tuple)) else [existing]
        app.conf.task_annotations = [_Annotation(self._runs, prepare(theirs)), *theirs]
        return app


class _Annotation:
    """Celery's annotation hook for every task: its call runs in the task's run, and a retry of
    an in-doubt error is refused. Celery applies only the first annotation that names a task, so
    this one goes first and carries the app's own annotation of the task along with it."""

    def __init__(self, runs: JobRuns, others: Iterable[Any]) -> None:
        self._runs = runs
        self._others = list(others)

    def annotate(self, task: celery.Task[Any, Any]) -> dict[str, Any]:
        theirs = next((found for a in self._others if (found := _annotation_of(a, task))), {})
        return {**theirs, "@__call__": self._around_call, "@retry": _around_retry}

    def annotate_any(self) -> None:
        return None  # the app's own "*" annotation still applies

    def _around_call(self, call: Method) -> Method:
        runs = self._runs

        def in_run(task: celery.Task[Any, Any], *args: Any, **kwargs: Any) -> Any:
            job_id = task.request.id
            if job_id is None:  # called as a plain function, not delivered as a task
                return call(task, *args, **kwargs)
            with runs.run(job_id):
                return call(task, *args, **kwargs)

        return in_run


def _annotation_of(annotation: Any, task: celery.Task[Any, Any]) -> dict[str, Any] | None:
    annotate = getattr(annotation, "annotate", None)
    return annotate(task) if annotate is not None else None


def _around_retry(retry: Method) -> Method:
    def unless_in_doubt(task: celery.Task[Any, Any], *args: Any, **kwargs: Any) -> Any:
        # retry(args, kwargs, exc, ...): autoretry_for passes exc=; a task's own
        # `raise self.retry()` inside `except` retries the error being handled.
        exc = kwargs.get("exc", args[2] if len(args) > 2 else None) or sys.exc_info()[1]
        if in_doubt(exc):
            raise exc  # type: ignore[misc]  # in_doubt() checked it is an exception
        return retry(task, *args, **kwargs)

    return unless_in_doubt
