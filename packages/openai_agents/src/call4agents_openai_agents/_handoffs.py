"""The agent behind a ``handoff()`` object, so ``OnceOnly.wrap`` reaches it as it reaches an
agent listed in ``handoffs`` directly.

A ``Handoff`` keeps its own settings (tool name, description, input filter, ``on_handoff``,
``is_enabled``): only the agent it leads to is decorated, in place, so it stays the object the
handoff returns. ``handoff(agent)`` holds its agent in ``_agent_ref``, a weak reference private
to the SDK (whose minor version the package pins, 0.24) that the SDK's own run-state and
visualisation code read the same way; a hand-built ``Handoff`` (or one whose reference is gone)
shows no agent until it is invoked, so the agent it returns is wrapped then, before the run
goes on with it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agents import Agent, Handoff, RunContextWrapper

# Set on the on_invoke_handoff OnceOnly installs, so wrapping twice wraps each arrival once.
_MARK = "__call4agents_handoff__"


def target(item: Handoff[Any, Any]) -> Agent[Any] | None:
    """The agent ``item`` hands off to, when it shows one before it is invoked."""
    ref = getattr(item, "_agent_ref", None)  # set by handoff(); None on a hand-built Handoff
    found = ref() if callable(ref) else None
    if found is None:
        found = getattr(item, "agent", None)  # an older custom handoff's own field, as the SDK
    return found if isinstance(found, Agent) else None


def wrap_on_arrival(item: Handoff[Any, Any], wrap: Callable[[Agent[Any]], None]) -> None:
    """Make ``item`` wrap the agent it returns before the run continues with it."""
    original = item.on_invoke_handoff
    if getattr(original, _MARK, False):
        return

    async def on_invoke_handoff(ctx: RunContextWrapper[Any], args: str) -> Any:
        arrived = await original(ctx, args)
        if isinstance(arrived, Agent):
            wrap(arrived)
        return arrived

    setattr(on_invoke_handoff, _MARK, True)
    item.on_invoke_handoff = on_invoke_handoff
