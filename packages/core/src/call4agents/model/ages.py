"""How long something has waited, worded one way wherever a person reads it: the CLI's tables,
the console's pages and the stats report all say ``40s``, ``12.5m``, ``3.2h``, ``1.5d``."""

from __future__ import annotations


def age(seconds: float | None) -> str:
    """``seconds`` in its largest whole unit, to a tenth; empty when there is no age. A span
    below zero (this machine's clock a little behind the database's) reads as ``0s``."""
    if seconds is None:
        return ""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f}{unit}"
    return f"{max(0.0, seconds):.0f}s"


def ago(then: float, now: float) -> str:
    """The moment ``then`` as seen from ``now``: ``3.2h ago``."""
    return f"{age(now - then)} ago"
