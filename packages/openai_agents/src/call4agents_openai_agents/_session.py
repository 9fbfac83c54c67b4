"""A ``Session`` that tells OnceOnly its id: ``session=once.session(SQLiteSession("ticket-7"))``.

The SDK hands a session the run's context when its history methods declare a ``wrapper``
parameter (the documented opt-in of ``agents.memory.Session``). This adapter declares it, notes
which run uses the session, and passes every call on to the session it wraps.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from agents import RunContextWrapper

from ._run_id import remember_session

if TYPE_CHECKING:
    from agents.items import TResponseInputItem
    from agents.memory import Session, SessionSettings


class RunIdSession:
    """The wrapped session, unchanged; its ``session_id`` becomes the run id of runs using it."""

    def __init__(self, session: Session) -> None:
        self.wrapped = session
        self.session_id: str = session.session_id

    @property
    def session_settings(self) -> SessionSettings | None:
        return self.wrapped.session_settings

    @session_settings.setter
    def session_settings(self, value: SessionSettings | None) -> None:
        self.wrapped.session_settings = value

    async def get_items(
        self, limit: int | None = None, *, wrapper: RunContextWrapper[Any] | None = None
    ) -> list[TResponseInputItem]:
        remember_session(wrapper, self.session_id)
        items: list[TResponseInputItem] = await _call(self.wrapped.get_items, wrapper, limit)
        return items

    async def add_items(
        self, items: list[TResponseInputItem], *, wrapper: RunContextWrapper[Any] | None = None
    ) -> None:
        remember_session(wrapper, self.session_id)
        await _call(self.wrapped.add_items, wrapper, items)

    async def pop_item(
        self, *, wrapper: RunContextWrapper[Any] | None = None
    ) -> TResponseInputItem | None:
        item: TResponseInputItem | None = await _call(self.wrapped.pop_item, wrapper)
        return item

    async def clear_session(self, *, wrapper: RunContextWrapper[Any] | None = None) -> None:
        await _call(self.wrapped.clear_session, wrapper)

    def __getattr__(self, name: str) -> Any:
        # Optional session capabilities (compaction, generation-aware reads) stay visible.
        if name == "wrapped":  # not set yet (a copy being built): no recursion
            raise AttributeError(name)
        return getattr(self.wrapped, name)

    def __repr__(self) -> str:
        return f"RunIdSession({self.wrapped!r})"


async def _call(method: Callable[..., Awaitable[Any]], wrapper: Any, *args: Any) -> Any:
    """Call the wrapped session's method, passing ``wrapper`` on only if it asks for it."""
    try:
        accepts = "wrapper" in inspect.signature(method).parameters
    except (TypeError, ValueError):
        accepts = False
    if accepts and wrapper is not None:
        return await method(*args, wrapper=wrapper)
    return await method(*args)
