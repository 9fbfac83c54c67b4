"""Once-only side effects under RQ, in one line::

    rq worker --job-class call4agents_jobs.rq.OnceOnly

(or ``Worker(queues, job_class=OnceOnly)``). Every job then runs inside
``c4a.run("rq-<job id>")``, in the work horse that runs it. RQ keeps a job's id when it retries the
job (``Retry(max=...)``, also after its work horse was killed) and when a failed job is requeued,
so a tool under ``@c4a.effect`` acts once however often the job runs. A job enqueued again has a
new id and is a new job.

A job whose action is in doubt fails with ``c4a.EffectInDoubt`` and is not retried: each retry
would only raise it again. Settle the action with ``call4agents resolve KEY --happened`` (or
``--did-not-happen``), then requeue the failed job (``job.requeue()``, keeping its id).

Settings are class attributes, as RQ makes the job objects: subclass it to set them::

    class Jobs(OnceOnly):
        ledger = "postgresql+psycopg://..."
"""

from __future__ import annotations

_FIX = 'pip install "call4agents-jobs[rq]"'

try:
    from rq.job import Job
except ImportError as exc:  # pragma: no cover - exercised only without the engine
    raise ImportError(f"call4agents_jobs.rq needs RQ 2 or later: {_FIX}") from exc

from typing import Any, ClassVar  # noqa: E402  (only after the engine check above)

from ._jobs import JobRuns, LedgerSetting, in_doubt  # noqa: E402

__all__ = ["OnceOnly"]


class OnceOnly(Job):
    """RQ's job class: every job runs inside the run named by its job id.

    Class attributes:
        ledger: a ledger URL (each work horse's process opens it), an open ``c4a.Ledger``, or
            None for the worker's default ledger (``$CALL4AGENTS_URL``).
        run_prefix: put before the job id to name the run.
    """

    ledger: ClassVar[LedgerSetting] = None
    run_prefix: ClassVar[str] = "rq-"
    _runs: ClassVar[JobRuns] = JobRuns("OnceOnly", None, "rq-")
    _in_doubt = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._runs = JobRuns(cls.__name__, cls.ledger, cls.run_prefix)  # checked at definition

    def perform(self) -> Any:
        with self._runs.run(self.id):
            try:
                return super().perform()
            except BaseException as exc:
                self._in_doubt = in_doubt(exc)
                raise

    @property
    def should_retry(self) -> bool:
        """RQ's retry decision, refused for an in-doubt failure."""
        return bool(super().should_retry) and not self._in_doubt
