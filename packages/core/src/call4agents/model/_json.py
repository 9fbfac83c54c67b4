"""Compact JSON writers built once: the canonical arguments' and the stored results'."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

_PROBE: Any = {"b": [1, 1.5, None, True], "a": "é"}


def json_writer(
    *,
    sort_keys: bool,
    ascii_only: bool = False,
    default: Callable[[Any], Any] | None = None,
) -> Callable[[Any], str]:
    """A compact, NaN-refusing JSON writer, reused on every call.

    Its C encoder is made once here: ``JSONEncoder.encode`` makes a new one on every call, which
    is most of what writing a small value costs (about a microsecond, twice an action). Values
    written here never hold a cycle (callers walk or build them first), so none is looked for.
    """
    encoder = json.JSONEncoder(
        sort_keys=sort_keys,
        separators=(",", ":"),
        ensure_ascii=ascii_only,
        allow_nan=False,
        check_circular=False,
        default=default,
    )
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:
        return encoder.encode
    quote = json.encoder.encode_basestring_ascii if ascii_only else json.encoder.encode_basestring
    try:
        # The arguments JSONEncoder.iterencode passes it, in its order.
        iterencode = make(None, encoder.default, quote, None, ":", ",", sort_keys, False, False)

        def write(value: Any) -> str:
            return "".join(iterencode(value, 0))

        if write(_PROBE) != encoder.encode(_PROBE):
            return encoder.encode
    except Exception:  # noqa: BLE001 - any surprise in a private API means: use the public one
        return encoder.encode
    return write
