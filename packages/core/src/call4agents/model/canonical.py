"""Canonical JSON of a tool's arguments: the material a stable action key is hashed from.

Two values a tool could treat differently never give the same text (``1`` vs ``1.0`` vs
``True``, ``(1,)`` vs ``[1]``, ``{1: x}`` vs ``{"1": x}``, a date vs its ISO string), and a value
with no stable form (NaN, a naive datetime, an object printed by memory address, a cycle) is
refused with the path of the offending field instead of silently producing a key that changes
between runs.

The value is walked as a stored result is (:mod:`.walk`, where non-JSON types get their ``$``
tags); what this module adds is the refusals, the order of sets and maps, and ignore/redact.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import json
import math
import re
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from .errors import ConfigurationError, UnstableArguments
from .paths import (
    Node,
    Refusal,
    class_ref,
    is_model_type,
    parse_paths,
    plan_for,
    type_name,
    unknown_reason,
)
from .walk import Handler, Walker

__all__ = ["CanonicalArgs", "canonical_args", "canonical_json", "parse_paths", "scrub"]


# -- compact JSON writers, built once (the canonical arguments' and, in codec, the results') --

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


MAX_DEPTH: Final = 64
# Secrets shorter than this would scrub ordinary words out of error texts.
_MIN_SECRET_LEN: Final = 4

_NoneType = type(None)
# Types that encode as themselves. Strict mode drops str and int so that the rare second pass can
# check each one for what json cannot write (lone surrogates, ints beyond the digit limit).
_FAST: Final[frozenset[type]] = frozenset((str, int, bool, _NoneType))
_FAST_STRICT: Final[frozenset[type]] = frozenset((bool, _NoneType))


@dataclasses.dataclass(frozen=True)
class CanonicalArgs:
    """The canonical forms of one call's arguments."""

    key_material: str
    """Compact sorted JSON to hash; a redacted value appears as ``{"$redacted": <hmac hex>}``."""
    display: str
    """The same JSON with each redacted value shown as ``"***"``: safe to store and print."""
    secrets: tuple[str, ...]
    """Printed forms of the redacted values, for :func:`scrub` to mask in error texts."""


# --- JSON writing -------------------------------------------------------------------------------


class _Redacted:
    """Stands in for a redacted value in the encoded tree until the two texts are written."""

    __slots__ = ("digest",)

    def __init__(self, digest: str) -> None:
        self.digest = digest


def _as_key_material(value: Any) -> Any:
    if isinstance(value, _Redacted):
        return {"$redacted": value.digest}
    raise TypeError(f"unexpected {type(value).__name__} in an encoded tree")


def _as_display(value: Any) -> Any:
    if isinstance(value, _Redacted):
        return "***"
    raise TypeError(f"unexpected {type(value).__name__} in an encoded tree")


_write: Final = json_writer(sort_keys=True)
_write_key_material: Final = json_writer(sort_keys=True, default=_as_key_material)
_write_display: Final = json_writer(sort_keys=True, default=_as_display)


# --- The encoder ----------------------------------------------------------------------------------

_HANDLERS: Final[dict[type, Handler]] = {}  # shared by every argument walk


class _Encoder(Walker):
    """The walk of a tool's arguments; one instance per call, never shared."""

    __slots__ = ("digest", "redactions", "secrets")

    def __init__(
        self, *, strict: bool = False, digest: Callable[[bytes], str] | None = None
    ) -> None:
        self.fast = _FAST_STRICT if strict else _FAST
        self.handlers = _HANDLERS
        self.max_depth = MAX_DEPTH
        self.strict = strict
        self.digest = digest
        self.redactions = 0
        self.secrets: list[str] = []

    def redacted(self, v: Any, depth: int, node: Node) -> _Redacted:
        try:
            tree = self.value(v, depth, node)
            data = _write(tree).encode("utf-8")
        except Refusal as refusal:
            # The path stops at the redacted field: anything below it (a dict key, an index)
            # could give the secret away.
            refusal.settle()
            refusal.trail.clear()
            raise
        except ValueError:
            # json or UTF-8 could not write it (huge int, lone surrogate): find out where, with
            # the same rule that the path stops here.
            try:
                _Encoder(strict=True).value(v, depth, node)
            except Refusal as refusal:
                refusal.settle()
                refusal.trail.clear()
                raise
            raise
        if self.digest is None:  # pragma: no cover - canonical_args checks this up front
            raise ConfigurationError(
                "redact= needs a digest function (redact_digest=) to hide values."
            )
        self.redactions += 1
        self.secrets.extend(_printed_forms(v))
        return _Redacted(self.digest(data))

    def pairs(self, v: dict[Any, Any], depth: int, node: Node | None) -> list[list[Any]]:
        # A dict's order is no part of its value: the pairs go in the order of their keys' text.
        return sorted(super().pairs(v, depth, node), key=lambda pair: _write(pair[0]))

    def on_set(self, v: Any, depth: int, node: Node | None) -> Any:
        inner = self.container(depth)
        # Nor is a set's order: its members go in the order of their text.
        members: list[tuple[str, Any]] = []
        for item in v:
            try:
                tree = self.value(item, inner, None)
            except Refusal as refusal:
                refusal.add(item, ("key", item))
                raise
            members.append((_write(tree), tree))
        members.sort(key=lambda member: member[0])
        return {"$frozenset" if isinstance(v, frozenset) else "$set": [t for _, t in members]}

    # The types written otherwise than a stored result writes them (see walk.Walker).

    def on_float(self, v: Any, depth: int, node: Node | None) -> Any:
        number = float.__float__(v)
        if math.isfinite(number):
            return number
        if math.isnan(number):
            raise Refusal("is NaN, which has no stable form")
        raise Refusal("is infinite, which has no stable form")

    def on_bytes(self, v: Any, depth: int, node: Node | None) -> Any:
        # bytes, bytearray (mutable) and memoryview are three types a tool may tell apart.
        tag = (
            "$bytearray"
            if isinstance(v, bytearray)
            else "$memoryview"
            if isinstance(v, memoryview)
            else "$bytes"
        )
        return {tag: base64.b64encode(bytes(v)).decode("ascii")}

    def on_datetime(self, v: Any, depth: int, node: Node | None) -> Any:
        if v.utcoffset() is None:
            raise Refusal("is a naive datetime; attach a timezone (datetime.now(timezone.utc))")
        if isinstance(v.tzinfo, dt.timezone):
            return {"$datetime": v.isoformat()}
        # A named zone (ZoneInfo("Europe/Paris")) moves its offset with the seasons where a fixed
        # offset does not: the same instant in each is two values a tool may treat differently.
        return {"$datetime": [v.isoformat(), _zone_name(v.tzinfo)]}

    def on_decimal(self, v: Any, depth: int, node: Node | None) -> Any:
        if v.is_nan():
            raise Refusal("is a Decimal NaN, which has no stable form")
        if v.is_infinite():
            raise Refusal("is an infinite Decimal, which has no stable form")
        return super().on_decimal(v, depth, node)

    def on_path(self, v: Any, depth: int, node: Node | None) -> Any:
        return {"$path": str(v)}

    def on_model(self, v: Any, depth: int, node: Node | None) -> Any:
        self.container(depth)  # a model too deep is refused before model_dump() walks it all
        try:
            dump = v.model_dump(mode="python")
        except Exception as exc:  # noqa: BLE001 - any failure means no stable form; say which
            # The exception text is left out: it may quote a field that is meant to be redacted.
            raise Refusal(
                f"is a {type_name(type(v))} whose model_dump() failed ({type(exc).__name__})"
            ) from None
        if type(dump) is not dict:
            raise Refusal(f"is a {type_name(type(v))} whose model_dump() is not a dict")
        # The dump stands in the model's place, at its depth.
        tree = [class_ref(type(v)), self.on_dict(dump, depth, node)]
        hidden = _excluded(v)
        if hidden:
            # Fields with exclude=True are left out of model_dump(), yet the tool reads them: two
            # models that differ only there are two actions. (Unchanged when a model has none.)
            tree.append(self.value(hidden, depth + 1, None))
        return {"$model": tree}

    def on_unknown(self, v: Any, depth: int, node: Node | None) -> Any:
        raise Refusal(unknown_reason(type(v)))


def _printed_forms(v: Any) -> list[str]:
    """str() of a redacted value and of the scalars inside it: what an error text could show."""
    found: list[str] = []
    stack = [v]
    while stack:
        item = stack.pop()
        text = item if isinstance(item, str) else str(item)
        # "True" and "None" are no secret, and masking them would garble error texts.
        if len(text) >= _MIN_SECRET_LEN and item is not None and not isinstance(item, bool):
            found.append(text)
        if isinstance(item, Mapping):
            stack.extend(item.values())
        elif isinstance(item, (list, tuple, set, frozenset)):
            stack.extend(item)
        elif dataclasses.is_dataclass(item) and not isinstance(item, type):
            stack.extend(getattr(item, field.name) for field in dataclasses.fields(item))
        elif is_model_type(type(item)):
            stack.extend(getattr(item, "__dict__", {}).values())
    return found


def _zone_name(tz: dt.tzinfo) -> str:
    name = getattr(tz, "key", None) or getattr(tz, "zone", None)  # zoneinfo, pytz
    return str(name) if name else f"{class_ref(type(tz))}:{tz!r}"


def _excluded(model: Any) -> dict[str, Any]:
    """The values model_dump() leaves out through ``exclude=True``, nested models' included."""
    found: dict[str, Any] = {}
    for name, info in type(model).model_fields.items():
        value = getattr(model, name, None)
        if getattr(info, "exclude", None) is True:
            found[name] = value
        elif is_model_type(type(value)):
            inner = _excluded(value)
            if inner:
                found[name] = inner
    return found


# --- Public functions -----------------------------------------------------------------------------


def canonical_args(
    tool: str,
    arguments: Mapping[str, Any],
    *,
    ignore: Sequence[str] = (),
    redact: Sequence[str] = (),
    redact_digest: Callable[[bytes], str] | None = None,
) -> CanonicalArgs:
    """Canonicalize a call's bound arguments (name -> value, in signature order).

    ``ignore`` paths are dropped before encoding, so an unstable value there is fine. ``redact``
    paths count in the key through ``redact_digest`` (an HMAC under the ledger's secret) of the
    value's canonical JSON, and show as ``"***"`` in :attr:`CanonicalArgs.display`. A path that a
    call does not have is skipped. Raises :class:`~call4agents.model.errors.UnstableArguments`.
    """
    if not ignore and not redact:
        text = _plain_text(arguments)
        if text is not None:
            return CanonicalArgs(text, text, ())
    root: Node | None = None
    if ignore or redact:
        plan = plan_for(_as_paths(ignore), _as_paths(redact))
        if plan.has_redact and redact_digest is None:
            raise ConfigurationError(
                f"{tool}: redact= needs redact_digest= to key redacted values by an HMAC"
            )
        root = plan.root
    encoder = _Encoder(digest=redact_digest)
    tree = _encode_top(tool, encoder, arguments, root)
    try:
        key_material = _write_key_material(tree) if encoder.redactions else _write(tree)
        if not key_material.isascii():
            key_material.encode("utf-8")
    except ValueError:
        _encode_top(tool, _Encoder(strict=True, digest=redact_digest), arguments, root)
        raise
    if not encoder.redactions:
        return CanonicalArgs(key_material, key_material, ())
    secrets = tuple(dict.fromkeys(encoder.secrets))
    return CanonicalArgs(key_material, _write_display(tree), secrets)


def _plain_text(arguments: Mapping[str, Any]) -> str | None:
    """The common call (a few str/int/bool/None arguments) without the general machinery."""
    for name, value in arguments.items():
        if type(value) not in _FAST or name.startswith("$"):
            return None
    try:  # the C encoder takes a dict as it is (no copy); any other mapping is copied into one
        text = _write(arguments if type(arguments) is dict else dict(arguments))
    except ValueError:  # an int past sys.get_int_max_str_digits(): the general path explains it
        return None
    return text if text.isascii() else None


def _as_paths(paths: Sequence[str]) -> tuple[str, ...]:
    if isinstance(paths, str):
        parse_paths(paths)  # raises the clear "pass a tuple" error
    return tuple(paths)


def _encode_top(
    tool: str, encoder: _Encoder, arguments: Mapping[str, Any], root: Node | None
) -> dict[str, Any]:
    try:
        tree = encoder.fields(arguments.items(), 1, root)
    except Refusal as refusal:
        refusal.settle()
        raise UnstableArguments(tool, refusal.path(), refusal.reason) from None
    return tree


def canonical_json(tool: str, value: Any, *, root: str = "key") -> str:
    """Canonical JSON of one value (no ignore/redact), e.g. of what a ``key=`` function returned.

    ``root`` names the value in error paths.
    """
    try:
        try:
            text = _write(_Encoder().value(value, 1, None))
            if not text.isascii():
                text.encode("utf-8")
        except ValueError:
            _Encoder(strict=True).value(value, 1, None)
            raise
    except Refusal as refusal:
        refusal.add(value, ("attr", root))
        refusal.settle()
        raise UnstableArguments(tool, refusal.path(), refusal.reason) from None
    return text


def scrub(text: str, secrets: Sequence[str]) -> str:
    """Replace every occurrence of each secret in ``text`` by ``***``.

    Longest first, so a secret that contains another is masked whole. Error texts quote values in
    other spellings too, so these are masked as well: repr- and JSON-escaped, percent-encoded (a
    key in a URL's query, either case of hex digits), and base64 that decodes to text holding the
    secret (an ``Authorization: Basic`` header is base64 of ``user:secret``).
    """
    forms: set[str] = set()
    for secret in secrets:
        if secret:
            forms.update(_spellings(secret))
    if not forms:
        return text
    for form in sorted(forms, key=len, reverse=True):
        if form and form in text:
            text = text.replace(form, "***")
    return _BASE64_RUN.sub(lambda m: _mask_encoded(m.group(), secrets), text)


def _spellings(secret: str) -> set[str]:
    quoted = urllib.parse.quote(secret, safe="")
    return {
        secret,
        repr(secret)[1:-1],
        json.dumps(secret)[1:-1],
        json.dumps(secret, ensure_ascii=False)[1:-1],
        quoted,
        _PERCENT.sub(lambda m: m.group().lower(), quoted),
        urllib.parse.quote_plus(secret, safe=""),
    }


# Runs of base64 long enough to hide a credential (standard and URL-safe alphabets).
_BASE64_RUN = re.compile(r"[A-Za-z0-9+/_-]{12,}={0,2}")
_PERCENT = re.compile(r"%[0-9A-F]{2}")


def _mask_encoded(run: str, secrets: Sequence[str]) -> str:
    for candidate in (run, run.lstrip("+/_-")):
        padded = candidate + "=" * (-len(candidate) % 4)
        for decode in (base64.b64decode, base64.urlsafe_b64decode):
            try:
                plain = decode(padded).decode("utf-8", "replace")
            except ValueError:
                continue
            if any(secret and secret in plain for secret in secrets):
                return "***"
    return run


def storable(text: str, limit: int) -> str:
    """``text`` as every ledger database can store it, cut to ``limit`` characters.

    A lone surrogate (a file name read with ``surrogateescape``) cannot be encoded as UTF-8 and a
    NUL cannot go into a PostgreSQL text column: either would make the write of a definite failure
    fail, leaving an action that did not act in doubt forever. Both become visible escapes.
    """
    if not text.isascii():
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text.replace("\x00", "\\x00")[:limit]
