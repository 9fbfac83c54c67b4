"""Once-only side effects in DBOS workflows and steps, as one decorator line.

    from call4agents_jobs.dbos import OnceOnly

    @DBOS.workflow()
    @OnceOnly()
    def notify(to: str) -> str:
        send_step(to)

    @DBOS.step()
    @OnceOnly()  # optional on a step: adds the step id, for tools declared scope="call"
    def send_step(to: str) -> None:
        send_email(to, "Your refund is on its way")  # an @c4a.effect tool

Every ``@c4a.effect`` tool called inside runs in the Call4Agents run ``dbos-<workflow id>``. DBOS
keeps the workflow id when it recovers a workflow whose process died, and re-runs the step that
was running: the tool's action is found in the ledger, so it returns its recorded result instead
of acting twice, or, if the process died inside the tool, the workflow fails with
``EffectInDoubt`` naming the action until a person settles it (``call4agents resolve``) and
``DBOS.resume_workflow`` finishes it.

``OnceOnly`` goes *below* ``@DBOS.workflow()``/``@DBOS.step()``, so that it runs inside DBOS's
own context, where the workflow and step ids are known. Called outside any workflow, the function
runs as it is, in whatever run the caller opened.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Awaitable, Callable
from typing import Any, ParamSpec, TypeVar, cast

_FIX = 'pip install "call4agents-jobs[dbos]"'

try:
    from dbos import DBOS
except ImportError as exc:  # pragma: no cover - exercised only without the engine
    raise ImportError(f"call4agents_jobs.dbos needs DBOS, which is not installed: {_FIX}") from exc

import call4agents as c4a  # noqa: E402  (only after the engine check above)
from call4agents.integration import (  # noqa: E402
    LedgerCore,
    check_trigger,
    current_run,
    run_part,
)

P = ParamSpec("P")
R = TypeVar("R")

PREFIX = "dbos-"


class OnceOnly:
    """A decorator that runs a DBOS workflow or step inside the Call4Agents run of its workflow.

    ``ledger``: the ledger the tools record in (default: the process's ``c4a.init()`` ledger).
    ``trigger``: what started the workflows (``"user"``, ``"schedule"``, ``"webhook"``), as
    ``c4a.run(..., trigger=...)`` records it.
    """

    def __init__(self, *, ledger: LedgerCore | None = None, trigger: str | None = None) -> None:
        self._ledger = ledger
        self._trigger = check_trigger(trigger)  # refused here, not inside a workflow

    def run_id(self, workflow_id: str) -> str:
        """The Call4Agents run of a workflow: ``dbos-<workflow id>``."""
        return PREFIX + workflow_id

    def __call__(self, fn: Callable[P, R]) -> Callable[P, R]:
        if inspect.iscoroutinefunction(fn):
            return cast("Callable[P, R]", self._wrap_async(fn))

        @functools.wraps(fn)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            with contextlib.ExitStack() as stack:
                for scope in self._scopes():
                    stack.enter_context(scope)
                return fn(*args, **kwargs)

        return wrapper

    def _wrap_async(self, fn: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        @functools.wraps(fn)
        async def wrapper(*args: Any, **kwargs: Any) -> Any:
            async with contextlib.AsyncExitStack() as stack:
                for scope in self._scopes():
                    if isinstance(scope, c4a.run):  # its ledger writes stay off the event loop
                        await stack.enter_async_context(scope)
                    else:
                        stack.enter_context(scope)
                return await fn(*args, **kwargs)

        return wrapper

    def _scopes(self) -> list[contextlib.AbstractContextManager[Any]]:
        """What to enter around the function: the workflow's run, and a step's id."""
        workflow_id = DBOS.workflow_id
        if workflow_id is None:
            return []  # outside a workflow: nothing stable names a run
        run_id, step_id = self.run_id(workflow_id), DBOS.step_id
        if step_id is None:
            return [c4a.run(run_id, ledger=self._ledger, trigger=self._trigger)]
        scopes: list[contextlib.AbstractContextManager[Any]] = []
        outer = current_run()
        if outer is None or outer.run_id != run_id:
            # A step is part of its workflow's run: the workflow's block (if any) ends the run.
            scopes.append(run_part(run_id, ledger=self._ledger))
        # The step id is the same when DBOS recovers the workflow or retries the step.
        scopes.append(c4a.tool_call(f"step-{step_id}"))
        return scopes


__all__ = ["OnceOnly"]
