"""Once-only side effects under Dramatiq, in one line::

    from call4agents_jobs.dramatiq import OnceOnly

    broker.add_middleware(OnceOnly())

Every message then runs inside ``c4a.run("dramatiq-<message id>")``. Dramatiq keeps a message's
id when the broker delivers it again (a worker lost before it acknowledged the message) and when
the Retries middleware enqueues it again, so a tool under ``@c4a.effect`` acts once however often
the message runs. A message sent again with ``actor.send(...)`` has a new id and is a new job.

A message whose action is in doubt fails with ``c4a.EffectInDoubt`` instead of being retried:
each retry would only raise it again. Settle the action with ``call4agents resolve KEY
--happened`` (or ``--did-not-happen``), then enqueue the same message again
(``broker.enqueue(message)``, keeping its id) to finish it.
"""

from __future__ import annotations

_FIX = 'pip install "call4agents-jobs[dramatiq]"'

try:
    import dramatiq  # noqa: F401  (the engine whose broker middleware OnceOnly is)
except ImportError as exc:  # pragma: no cover - exercised only without the engine
    raise ImportError(f"call4agents_jobs.dramatiq needs Dramatiq 1.17 or later: {_FIX}") from exc

import threading  # noqa: E402  (only after the engine check above)
from typing import Any  # noqa: E402

from dramatiq.broker import Broker, MessageProxy  # noqa: E402
from dramatiq.middleware import Middleware  # noqa: E402

import call4agents as c4a  # noqa: E402
from call4agents import EffectInDoubt  # noqa: E402

from ._jobs import JobRuns, LedgerSetting, in_doubt  # noqa: E402

__all__ = ["OnceOnly"]


class OnceOnly(Middleware):
    """Broker middleware: every message runs inside the run named by its message id.

    Args:
        ledger: a ledger URL (each worker process opens it on its first message), an open
            ``c4a.Ledger``, or None for the worker's default ledger (``$CALL4AGENTS_URL``).
        run_prefix: put before the message id to name the run.

    Add it after Dramatiq's Retries middleware (``add_middleware`` appends, so the default
    place is right): it marks an in-doubt failure as one Retries must not retry.
    """

    def __init__(self, ledger: LedgerSetting = None, *, run_prefix: str = "dramatiq-") -> None:
        self._runs = JobRuns("OnceOnly", ledger, run_prefix)
        self._current = threading.local()  # the run of the message this worker thread runs

    def before_process_message(self, broker: Broker, message: MessageProxy) -> None:
        scope = self._runs.run(message.message_id)
        scope.__enter__()
        self._current.scope = scope

    def after_process_message(
        self,
        broker: Broker,
        message: MessageProxy,
        *,
        result: Any = None,
        exception: BaseException | None = None,
    ) -> None:
        self._leave(exception)
        if in_doubt(exception):
            # Retries skips an error listed in the message's "throws" option; middleware after
            # it runs first on the way out, so the message fails here instead of being retried.
            actor = broker.get_actor(message.actor_name)
            throws = message.options.get("throws") or actor.options.get("throws") or ()
            listed = throws if isinstance(throws, tuple) else (throws,)
            message.options["throws"] = (*listed, EffectInDoubt)

    def after_skip_message(self, broker: Broker, message: MessageProxy) -> None:
        self._leave(None)

    def _leave(self, exception: BaseException | None) -> None:
        scope: c4a.run | None = getattr(self._current, "scope", None)
        self._current.scope = None
        if scope is not None:  # None: another middleware failed before this one entered it
            error = type(exception) if exception is not None else None
            scope.__exit__(error, exception, exception.__traceback__ if exception else None)
