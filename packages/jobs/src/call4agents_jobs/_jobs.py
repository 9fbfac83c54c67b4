"""What every job queue's ``OnceOnly`` shares: its settings, the ledger each worker process opens
for itself, and the run one job runs in. It imports no engine.

A job runs inside ``c4a.run(prefix + job_id)``, where the job id is the one the broker keeps when
it delivers the same job again (a lost worker, a visibility timeout, a retry). Every
``@c4a.effect`` tool the job calls is then keyed by that run: a redelivered job gets the
recorded result instead of acting twice, and an action cut off mid-call is in doubt.
"""

from __future__ import annotations

import os
import threading

import call4agents as c4a
from call4agents import ConfigurationError, EffectInDoubt, Ledger
from call4agents.integration import check_ledger

LedgerSetting = str | Ledger | None


class JobRuns:
    """The runs of one engine's jobs, in the ledger each worker process opens once.

    ``ledger``: a URL (each worker process opens it on its first job: a prefork child never
    shares its parent's connections), an open ``c4a.Ledger``, or None for the process's default
    (``c4a.init()``'s, opened from ``$CALL4AGENTS_URL`` when the worker has none).
    """

    def __init__(self, owner: str, ledger: LedgerSetting, run_prefix: str) -> None:
        check_ledger(ledger, owner, url=True)
        if not isinstance(run_prefix, str):
            raise ConfigurationError(
                f"{owner}(run_prefix=...) takes a string such as 'jobs-'; got "
                f"{type(run_prefix).__name__}"
            )
        self._setting = ledger
        self._prefix = run_prefix
        self._opened: dict[int, Ledger] = {}  # by process id: a forked child opens its own
        self._lock = threading.Lock()

    def run_id(self, job_id: str) -> str:
        return f"{self._prefix}{job_id}"

    def ledger(self) -> Ledger:
        """This worker process's ledger, opened on its first job."""
        if isinstance(self._setting, Ledger):
            return self._setting  # the core reopens its connections after a fork
        pid = os.getpid()
        with self._lock:  # a threaded worker's first jobs may start together
            if pid not in self._opened:
                self._opened = {pid: self._open()}
            return self._opened[pid]

    def _open(self) -> Ledger:
        if isinstance(self._setting, str):
            return Ledger(self._setting)
        try:
            return c4a.default_ledger()
        except ConfigurationError:
            return c4a.init()

    def run(self, job_id: str) -> c4a.run:
        """The block one delivery of a job runs in."""
        return c4a.run(self.run_id(job_id), ledger=self.ledger())


def in_doubt(exc: BaseException | None) -> bool:
    """Whether a job failed because an action is in doubt: retrying it blindly cannot help,
    since the repeat raises the same error until a person settles the action."""
    return isinstance(exc, EffectInDoubt)
