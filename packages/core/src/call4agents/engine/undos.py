"""How to reverse each tool, as its ``@c4a.effect(undo=...)`` declared, in this process.

The engine records the declaration when a tool is defined; ``ledger.undo`` (a control, above the
engine) looks it up when it reverses a run.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

UndoFn = Callable[..., Any]

_registry: dict[str, UndoFn] = {}


def register_undo(tool: str, fn: UndoFn) -> None:
    """Record how to reverse ``tool`` in this process (done by ``@c4a.effect(undo=...)``)."""
    if not callable(fn):
        raise TypeError(f"undo= for {tool} must be callable, got {type(fn).__name__}")
    _registry[tool] = fn


def undo_for(tool: str) -> UndoFn | None:
    return _registry.get(tool)
