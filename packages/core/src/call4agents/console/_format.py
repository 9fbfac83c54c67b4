"""Values as the pages word them: ages, times, JSON, redacted values. Text only: markup is the
templates' (``templates/``), and every value reaches a page escaped."""

from __future__ import annotations

import json
import time
from typing import Any

REDACTED = "***"  # how the ledger stores a redacted value in what it shows
REDACTED_JSON = json.dumps(REDACTED)


def ago(then: float | None, now: float | None = None) -> str:
    if then is None:
        return ""
    seconds = max(0.0, (now if now is not None else time.time()) - then)
    if seconds < 90:
        return f"{seconds:.0f}s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def clock(at: float | None) -> str:
    if at is None:
        return ""
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(at))


def count_redacted(value: Any) -> int:
    if isinstance(value, dict):
        return sum(count_redacted(v) for v in value.values())
    if isinstance(value, list):
        return sum(count_redacted(v) for v in value)
    return int(value == REDACTED)


def json_parts(value: Any) -> list[str]:
    """Pretty JSON cut at each redacted value, so the template marks each one for the reader
    (``"***"`` is masked: the tool gets the real value)."""
    text = json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)
    return text.split(REDACTED_JSON)


def age(seconds: float | None) -> str:
    """A span as the health figures say it: 3.2 h, 1.5 d, 40s."""
    if seconds is None:
        return ""
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.0f}s"
