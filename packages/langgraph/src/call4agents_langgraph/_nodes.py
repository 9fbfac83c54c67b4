"""Side effects inside custom graph nodes, made once per thread.

LangGraph re-runs a node from its top when it resumes after ``interrupt()`` and when a crashed run
is resumed, so whatever the node did before the pause or the crash happens again. Inside a node
decorated with ``@once.node`` each ``once.call(...)`` is keyed by what survives those re-runs: the
thread, and for ``scope="call"`` steps the checkpoint namespace, the task id (LangGraph derives it
from the checkpoint and the node, so a re-run gets the same one) and the call's order in the node.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Awaitable, Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar, cast

from langgraph.runtime import get_runtime

import call4agents as c4a
from call4agents import Budget, ConfigurationError, EffectOptions, Ledger
from call4agents.integration import Action, action_for, arun_tool, ends_run, run_part, run_tool

from ._endings import as_signal
from ._ids import thread_run_id

T = TypeVar("T")


class Owner(Protocol):
    """What the node steps need of the OnceOnly they belong to."""

    ledger: Ledger | None
    budget: Budget | None

    def options(self, tool: str) -> EffectOptions: ...


@dataclass
class _Scope:
    """One execution of one decorated node."""

    run_id: str
    task: str  # checkpoint namespace and task id: the same on every re-run of this task
    calls: int = field(default=0)

    def next_call_id(self) -> str:
        self.calls += 1
        return f"{self.task}#{self.calls}"


_current: ContextVar[_Scope | None] = ContextVar("call4agents_langgraph_node", default=None)


class NodeSteps:
    """The node decorator and ``call``/``acall`` of one OnceOnly."""

    def __init__(self, once: Owner) -> None:
        self._once = once

    def decorate(self, fn: Callable[..., T]) -> Callable[..., T]:
        # functools.wraps keeps the signature LangGraph inspects to inject config and runtime.
        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def anode(*args: Any, **kwargs: Any) -> Any:
                with self._scope(fn, args):
                    return await fn(*args, **kwargs)

            return cast(Callable[..., T], anode)

        @functools.wraps(fn)
        def node(*args: Any, **kwargs: Any) -> T:
            with self._scope(fn, args):
                return fn(*args, **kwargs)

        return node

    @contextlib.contextmanager
    def _scope(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> Iterator[None]:
        where = f"node {getattr(fn, '__name__', fn)!r}"
        try:
            info = get_runtime().execution_info
        except RuntimeError:
            raise ConfigurationError(
                f"{where} decorated with @once.node was called outside a LangGraph run"
            ) from None
        run_id = thread_run_id(info, args[0] if args else None, where)
        assert info is not None  # thread_run_id refuses a run without one
        scope = _Scope(run_id, f"{info.checkpoint_ns}|{info.task_id}")
        token = _current.set(scope)
        once = self._once
        try:
            # @c4a.effect functions called in the node belong to the thread's run too, and spend
            # its budget: OnceOnly's own, or an enclosing run's.
            with (
                run_part(run_id, ledger=once.ledger, budget=once.budget),
                c4a.tool_call(scope.task),
            ):
                yield
        except Exception as exc:
            if ends_run(exc):  # past node retry policies and error handlers, out of the graph
                raise as_signal(exc) from exc.__cause__
            raise
        finally:
            _current.reset(token)

    def call(self, fn: Callable[..., T], args: tuple[Any, ...], kwargs: dict[str, Any]) -> T:
        if isinstance(fn, c4a.Effect):
            return cast(T, fn(*args, **kwargs))  # already once-only, in the node's run
        action = self._action(fn, args, kwargs)
        return run_tool(action, lambda: fn(*args, **kwargs))

    async def acall(
        self, fn: Callable[..., Awaitable[T]], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> T:
        if isinstance(fn, c4a.Effect):
            return cast(T, await fn(*args, **kwargs))
        action = self._action(fn, args, kwargs)
        return await arun_tool(action, lambda: fn(*args, **kwargs))

    def _action(
        self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Action:
        scope = _current.get()
        name = _step_name(fn)
        if scope is None:
            raise ConfigurationError(
                f"once.call({name}, ...) runs inside a graph node decorated with @once.node, "
                "which gives it the thread and task it belongs to"
            )
        call_id = scope.next_call_id()  # counted for every step, so the order stays stable
        return action_for(
            name,
            _arguments(fn, name, args, kwargs),
            self._once.options(name),
            run_id=scope.run_id,
            call_id=call_id,
            ledger=self._once.ledger,
        )


def _step_name(fn: Callable[..., Any]) -> str:
    name = getattr(fn, "__name__", None)
    if not isinstance(name, str) or not name or name == "<lambda>":
        raise ConfigurationError(
            f"once.call needs a named function (its name keys the action), not {fn!r}"
        )
    return name


def _arguments(
    fn: Callable[..., Any], name: str, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> dict[str, Any]:
    try:
        bound = inspect.signature(fn).bind(*args, **kwargs)
    except TypeError as exc:
        raise TypeError(f"{name}: {exc}") from None
    bound.apply_defaults()
    return dict(bound.arguments)
