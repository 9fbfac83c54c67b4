"""Keys of the plainest calls, remembered by value.

A call's key is the SHA-256 of its run, tool, call id and canonical arguments, and working it out
(canonical JSON, then the hash) is a third of what a repeat served from memory costs. For a call
whose arguments are all ``str``, ``int``, ``bool`` or ``None`` (exactly those types, no
subclasses) the canonical arguments are a pure function of the names, the values and their
types, so the key is kept here under exactly those, and the next equal call skips both steps.
Types are part of what is compared because Python's ``True == 1`` is not JSON's.

Only calls with no ``key=``, ``ignore=`` or ``redact=`` are kept (those involve the tool's code
or the ledger's secret), only short ones (``_MAX_TEXT``), and at most ``_LIMIT`` of them: the
memo is emptied when full, so its memory stays bounded in a worker that lives for millions of
runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from call4agents.model.canonical import CanonicalArgs

_PLAIN: Final[frozenset[type]] = frozenset((str, int, bool, type(None)))
_LIMIT: Final = 4096
_MAX_TEXT: Final = 1024  # characters of canonical arguments

Memo = tuple[Any, ...]

_kept: dict[Memo, tuple[str, CanonicalArgs]] = {}


def memo_of(
    tool: str, run_id: str, call_id: str | None, arguments: Mapping[str, Any]
) -> Memo | None:
    """What a call is remembered by, or None if its arguments are not all of the plain types
    (then nothing user-defined is hashed or compared here either)."""
    values = tuple(arguments.values())
    types = tuple(map(type, values))
    if not _PLAIN.issuperset(types):
        return None
    return (tool, run_id, call_id, tuple(arguments), values, types)


def recall(memo: Memo | None) -> tuple[str, CanonicalArgs] | None:
    """The key and canonical arguments kept for ``memo``, if any."""
    return None if memo is None else _kept.get(memo)


def keep(memo: Memo | None, key: str, canon: CanonicalArgs) -> None:
    if memo is None or len(canon.display) > _MAX_TEXT:
        return
    if len(_kept) >= _LIMIT:
        _kept.clear()  # one call, safe against other threads (popping the oldest is not)
    _kept[memo] = (key, canon)
