"""Values as the pages word them: times, JSON, redacted values (ages are ``model.ages``'). Text
only: markup is the templates' (``templates/``), and every value reaches a page escaped."""

from __future__ import annotations

import json
import time
from typing import Any

REDACTED = "***"  # how the ledger stores a redacted value in what it shows
REDACTED_JSON = json.dumps(REDACTED)


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
