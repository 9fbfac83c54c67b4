"""Once-only side effects in Temporal activities, as one worker interceptor.

    from call4agents_jobs.temporal import OnceOnly

    worker = Worker(client, task_queue="emails", workflows=[...], activities=[...],
                    interceptors=[OnceOnly()])

Temporal delivers an activity at least once: a worker that dies after the activity acted, or a
completion lost on its way to the server, and the activity runs again on another worker. Under
``OnceOnly`` every activity runs inside the Call4Agents run
``temporal-<workflow id>/<workflow run id>/<activity id>``, which every retry of that activity
shares, so an ``@c4a.effect`` tool it calls acts once: a retry returns the recorded result. A
worker killed inside the tool leaves the action in doubt; each retry then fails with
``EffectInDoubt`` (retryable: the tool is not run) until a person settles it with
``call4agents resolve``, and the next retry finishes the activity.

The ledger's lease on a running tool is renewed by the ledger's own heartbeat thread for as long
as the worker process lives, the same lifetime Temporal's activity heartbeats stand for, so the
activity need not heartbeat for the ledger's sake. Sync activities must run on a thread pool
(Temporal's usual ``activity_executor``): a process pool does not carry the run into its
processes.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable
from typing import Any

_FIX = 'pip install "call4agents-jobs[temporal]"'

try:
    from temporalio import activity
    from temporalio.exceptions import ApplicationError
    from temporalio.worker import (
        ActivityInboundInterceptor,
        ExecuteActivityInput,
        Interceptor,
    )
except ImportError as exc:  # pragma: no cover - exercised only without the engine
    raise ImportError(
        f"call4agents_jobs.temporal needs the Temporal Python SDK, which is not installed: {_FIX}"
    ) from exc

import call4agents as c4a  # noqa: E402  (only after the engine check above)
from call4agents.integration import LedgerCore, ends_run  # noqa: E402

PREFIX = "temporal-"


def default_run_id(info: activity.Info) -> str:
    """``temporal-<workflow id>/<workflow run id>/<activity id>``: the same on every retry.

    The workflow's run id is part of it because a workflow that continues as new keeps its id
    and numbers its activities from 1 again. An activity started on its own (no workflow) is
    named by its activity id alone.
    """
    if info.workflow_id is None:
        return f"{PREFIX}{info.activity_id}"
    return f"{PREFIX}{info.workflow_id}/{info.workflow_run_id}/{info.activity_id}"


class OnceOnly(Interceptor):
    """A worker interceptor that runs every activity in a Call4Agents run of its own.

    ``ledger``: the ledger the tools record in (default: the process's ``c4a.init()`` ledger).
    ``run_id``: the run of an activity, from its ``activity.Info`` (default
    :func:`default_run_id`); it must be the same on every retry of the activity.
    """

    def __init__(
        self,
        *,
        ledger: LedgerCore | None = None,
        run_id: Callable[[activity.Info], str] = default_run_id,
    ) -> None:
        self.ledger = ledger
        self.run_id = run_id

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _ActivityInbound(next, self)


class _ActivityInbound(ActivityInboundInterceptor):
    def __init__(self, next: ActivityInboundInterceptor, once: OnceOnly) -> None:
        super().__init__(next)
        self._once = once

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        if input.executor is not None and not isinstance(
            input.executor, concurrent.futures.ThreadPoolExecutor
        ):
            raise ApplicationError(
                "call4agents_jobs.temporal.OnceOnly cannot carry the run into a process pool: "
                "run sync activities on a concurrent.futures.ThreadPoolExecutor",
                type="ConfigurationError",
                non_retryable=True,
            )
        run_id = self._once.run_id(activity.info())
        try:
            # Temporal copies this context into the thread of a sync activity.
            async with c4a.run(run_id, ledger=self._once.ledger):
                return await self.next.execute_activity(input)
        except Exception as exc:
            if not isinstance(exc, c4a.Call4AgentsError) and not ends_run(exc):
                raise  # the tool's own error, as Temporal would see it without us
            raise _application_error(exc) from None  # the error itself is what Temporal shows


def _application_error(exc: Exception) -> ApplicationError:
    """The error as Temporal reports it: typed by its class, with the action in its details.

    In doubt, in progress and approval needed stay retryable: a retry never runs the tool blindly,
    and the first retry after a person settles the action finishes the activity. A denial, a
    spent budget and an escalation do not change by retrying.
    """
    final = isinstance(exc, c4a.ApprovalDenied) or ends_run(exc)
    details = {name: getattr(exc, name) for name in ("key", "run_id", "tool") if hasattr(exc, name)}
    return ApplicationError(str(exc), details, type=type(exc).__name__, non_retryable=final)


__all__ = ["OnceOnly", "default_run_id"]
