"""Every error Call4Agents raises on purpose. All subclass :class:`Call4AgentsError`.

Messages follow one rule: say what happened, then what to do about it, in one or two sentences.
"""

from __future__ import annotations

from typing import Any


class Call4AgentsError(Exception):
    """Base class of every error raised by Call4Agents itself.

    Every one survives ``pickle`` with its type, message and attributes, so a job queue's result
    backend, a process pool or a durable engine hands back the error itself (and the key a person
    needs for ``call4agents resolve``), not a ``TypeError`` from re-calling its constructor.
    """

    def __reduce__(self) -> tuple[Any, ...]:
        # Exception's own reduce re-calls ``type(self)(*self.args)``, which the keyword-only
        # constructors below refuse; rebuild from the message and attributes instead.
        return (_restore, (type(self), self.args, self.__dict__.copy()))


def _restore(cls: type[Call4AgentsError], args: tuple[Any, ...], state: dict[str, Any]) -> Any:
    """An unpickled error: its message args and attributes, without re-running its constructor."""
    error = cls.__new__(cls, *args)
    error.args = args
    error.__dict__.update(state)
    return error


class LedgerError(Call4AgentsError):
    """The ledger cannot be used as asked: newer schema, unsafe location, database fault."""


class ConfigurationError(Call4AgentsError):
    """An effect, a run or a ledger was set up in a way that cannot give a stable guarantee."""


class UnstableArguments(ConfigurationError):
    """An argument has no stable canonical form, so no stable key can be derived from it.

    Raised before anything is written or run.
    """

    def __init__(self, tool: str, path: str, reason: str) -> None:
        self.tool = tool
        self.path = path
        self.reason = reason
        super().__init__(
            f"{tool}: argument {path!r} {reason}. Nothing was written or run. Pass a value with a "
            f"stable form, drop the field from the key with ignore=({_top(path)!r},), "
            "or name the action yourself with key=."
        )


def _top(path: str) -> str:
    """The argument name that starts an error path such as ``items[2].price``."""
    for i, ch in enumerate(path):
        if ch in ".[":
            return path[:i]
    return path


class _EffectError(Call4AgentsError):
    """An error about one recorded action (effect)."""

    def __init__(self, message: str, *, key: str, run_id: str, tool: str) -> None:
        self.key = key
        self.run_id = run_id
        self.tool = tool
        super().__init__(message)


class EffectInDoubt(_EffectError):
    """The action may or may not have happened, so it is not run again blindly.

    Settle it with ``ledger.resolve(...)`` or ``call4agents resolve``, a ``check=`` reconciler, or
    ``retry_in_doubt=True`` on a tool that forwards its idempotency key to a provider that drops
    duplicates.
    """

    def __init__(self, *, key: str, run_id: str, tool: str, reason: str, attempt: int) -> None:
        self.reason = reason
        self.attempt = attempt
        super().__init__(
            f"{tool} in run {run_id!r} is in doubt ({reason}): it may or may not have happened, "
            f"so it was not run again. Find out whether it happened, then record it with "
            f"`call4agents resolve {key[:12]} --happened` or `--did-not-happen`.",
            key=key,
            run_id=run_id,
            tool=tool,
        )


class EffectInProgress(_EffectError):
    """Another live worker holds the action's lease and did not finish within the wait."""

    def __init__(self, *, key: str, run_id: str, tool: str, owner: str, waited: float) -> None:
        self.owner = owner
        self.waited = waited
        super().__init__(
            f"{tool} in run {run_id!r} is being run by another worker ({owner}) and did not finish "
            f"within {waited:.1f}s. It was not run again; call again later to get its result, or "
            "raise the wait with @effect(wait=...).",
            key=key,
            run_id=run_id,
            tool=tool,
        )


class ResultNotStored(_EffectError):
    """The action ran and is recorded as done, but its result could not be stored.

    Repeats raise this error too: the action is never run again.
    """

    def __init__(self, *, key: str, run_id: str, tool: str, why: str) -> None:
        self.why = why
        super().__init__(
            f"{tool} in run {run_id!r} ran and is recorded as done, but its result could not be "
            f"stored ({why}). It will not run again. Return a smaller, JSON-like value (or raise "
            "max_result_bytes on init) for future actions.",
            key=key,
            run_id=run_id,
            tool=tool,
        )


class ResultPruned(_EffectError):
    """The action ran; ``gc`` removed its result but kept a tombstone so it never re-runs."""

    def __init__(self, *, key: str, run_id: str, tool: str) -> None:
        super().__init__(
            f"{tool} in run {run_id!r} already ran; its result was removed by `call4agents gc`, so "
            "it is not run again and its result cannot be returned.",
            key=key,
            run_id=run_id,
            tool=tool,
        )


class ApprovalRequired(_EffectError):
    """The action needs a person's "yes" to exactly these arguments before it runs.

    ``shown`` is the ticket first shown for this framework call when it showed other arguments
    (a saved state edited after it was shown), else None.
    """

    def __init__(
        self, message: str, *, key: str, run_id: str, tool: str, request: Any, shown: Any = None
    ) -> None:
        self.request = request
        self.shown = shown
        super().__init__(message, key=key, run_id=run_id, tool=tool)


class ApprovalDenied(_EffectError):
    """A person (or a policy) said no to this exact action."""

    def __init__(self, message: str, *, key: str, run_id: str, tool: str, reason: str) -> None:
        self.reason = reason
        super().__init__(message, key=key, run_id=run_id, tool=tool)


class OutcomeUnknown(Exception):
    """Raise from a tool when it cannot tell whether the outside world acted.

    The action is then recorded as in doubt instead of failed, and is never re-run blindly.
    """


class BudgetExceeded(Call4AgentsError):
    """The run hit a limit of its :class:`Budget`; the call was not run.

    ``reason`` is ``"step_limit"`` (tool calls in all or per tool, or model requests),
    ``"budget"`` (the cost ceiling) or ``"deadline"``; it is also recorded as the run's ending
    (``ledger.run_status(run_id)``, ``call4agents show RUN``). Integrations let it end the
    agent's run rather than show it to the model: the hard cut is not a tool error to work around.
    """

    def __init__(self, *, run_id: str, tool: str, reason: str, detail: str) -> None:
        self.run_id = run_id
        self.tool = tool
        self.reason = reason
        self.detail = detail
        super().__init__(
            f"{tool} was not run: run {run_id!r} hit its {reason.replace('_', ' ')} ({detail}). "
            "Wrap up the run, or start it again with a larger budget."
        )
