"""Read-before-write, for APIs that take no idempotency key.

The tool plants a short tag derived from its stable idempotency key in what it creates (a title
suffix, a label, a metadata field), and a ``find_existing=`` hook looks for that tag before the
tool runs. What the hook finds is recorded as the action's result instead of creating a second
resource. The same hook settles a crash between creating and recording: found means it
happened, not found means it did not, so the action runs (finder first) again.

    @c4a.effect(find_existing=lambda title, body: c4a.find_marked(tracker.search(c4a.key_marker())))
    def open_ticket(title: str, body: str) -> dict:
        return tracker.create(title=f"{title} {c4a.key_marker()}", body=body)
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any, TypeVar

from .context import current
from .verdicts import DidNotHappen, Happened

if TYPE_CHECKING:
    from .action import Action

T = TypeVar("T")
Item = TypeVar("Item")

MARKER_PREFIX = "[c4a:"
_MARKER_HEX = 16  # 64 bits: no two actions' markers meet in one search result


def key_marker(idempotency_key: str | None = None) -> str:
    """A short tag naming the current action, e.g. ``"[c4a:9f2c41d07ab3e815]"``.

    Inside a tool run through Call4Agents (or its ``find_existing=`` hook) it is derived from
    ``c4a.current().idempotency_key``, so it is the same on every attempt and after a crash.
    Put it where the created resource can be searched for: a title, a label, a metadata field.
    """
    key = idempotency_key if idempotency_key is not None else current().idempotency_key
    return f"{MARKER_PREFIX}{key.removeprefix('c4a-')[:_MARKER_HEX]}]"


def find_marked(
    items: Iterable[Item],
    text: Callable[[Item], Any] = str,
    *,
    marker: str | None = None,
) -> Item | None:
    """The first item whose text carries the current action's marker, else None.

    ``text`` picks what to look in (default ``str(item)``), e.g. ``lambda t: t["title"]``.
    """
    wanted = marker if marker is not None else key_marker()
    for item in items:
        found = text(item)
        if found is not None and wanted in str(found):
            return item
    return None


def finder_first(action: Action, call: Callable[[], T]) -> Callable[[], T]:
    """``call`` preceded by the tool's ``find_existing=`` hook (sync tools)."""
    finder = action.options.find_existing
    if finder is None:
        return call

    def go() -> T:
        found = finder(**action.arguments)
        return call() if found is None else found

    return go


def afinder_first(action: Action, call: Callable[[], Awaitable[T]]) -> Callable[[], Awaitable[T]]:
    """``call`` preceded by the tool's ``find_existing=`` hook (async tools; sync hooks too)."""
    finder = action.options.find_existing
    if finder is None:
        return call

    async def go() -> T:
        found = finder(**action.arguments)
        if inspect.isawaitable(found):
            found = await found
        return await call() if found is None else found

    return go


def check_from_finder(finder: Callable[..., Any]) -> Callable[..., Any]:
    """A ``check=`` reconciler made from a finder: found means Happened, nothing DidNotHappen."""

    def verdict(found: Any) -> Happened | DidNotHappen:
        return DidNotHappen() if found is None else Happened(found)

    def check(**arguments: Any) -> Any:
        return when_done(finder(**arguments), verdict)

    return check


def when_done(value: Any, convert: Callable[[Any], Any]) -> Any:
    """``convert(value)``, or, for an awaitable, an awaitable of it (for sync-or-async hooks)."""
    return _later(value, convert) if inspect.isawaitable(value) else convert(value)


async def _later(awaitable: Any, convert: Callable[[Any], Any]) -> Any:
    return convert(await awaitable)
