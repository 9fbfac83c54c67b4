"""What an action's outcome means: errors that leave it in doubt, and a reconciler's answers."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from call4agents.model.errors import EffectInDoubt, OutcomeUnknown

if TYPE_CHECKING:
    from .action import EffectOptions

# Errors after which the outside world may or may not have acted. Everything else that derives
# from Exception means the tool did not act; BaseExceptions (cancellation, KeyboardInterrupt,
# SystemExit) stop a tool half-way, so they mean in doubt too.
if sys.version_info >= (3, 11):
    _TIMEOUTS: tuple[type[BaseException], ...] = (TimeoutError,)  # asyncio's is this same class
else:  # pragma: no cover - Python 3.10
    import asyncio

    _TIMEOUTS = (TimeoutError, asyncio.TimeoutError)
IN_DOUBT_ERRORS: tuple[type[BaseException], ...] = (*_TIMEOUTS, OutcomeUnknown, EffectInDoubt)


@dataclass(frozen=True)
class Happened:
    """A reconciler's answer: the action did happen, and this is its result."""

    result: Any = None


@dataclass(frozen=True)
class DidNotHappen:
    """A reconciler's answer: the action did not happen; it may run as a new attempt."""


def is_in_doubt_error(exc: BaseException, options: EffectOptions) -> bool:
    if not isinstance(exc, Exception):
        return True
    return isinstance(exc, (IN_DOUBT_ERRORS, options.in_doubt_on))
