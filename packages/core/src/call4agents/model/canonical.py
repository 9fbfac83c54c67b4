"""Canonical JSON of a tool's arguments: the material a stable action key is hashed from.

Two values a tool could treat differently never give the same text (``1`` vs ``1.0`` vs
``True``, ``(1,)`` vs ``[1]``, ``{1: x}`` vs ``{"1": x}``, a date vs its ISO string), and a value
with no stable form (NaN, a naive datetime, an object printed by memory address, a cycle) is
refused with the path of the offending field instead of silently producing a key that changes
between runs.

Non-JSON types are written as single-key objects whose key starts with ``$``, such as
``{"$tuple": [...]}``; a user's own keys starting with ``$`` get one more ``$`` so they can never
pass for such a tag.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import decimal
import enum
import json
import math
import pathlib
import re
import urllib.parse
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final

from .errors import ConfigurationError, UnstableArguments
from .paths import (
    EACH,
    IGNORE,
    REDACT,
    Node,
    Refusal,
    class_ref,
    escape,
    is_model_type,
    parse_paths,
    plan_for,
    type_name,
    unknown_reason,
)

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

_Handler = Callable[["_Encoder", Any, int, "Node | None"], Any]
# Handler per concrete type, filled on first sight: what a type needs depends only on the type.
_HANDLERS: dict[type, _Handler] = {}
_MAX_HANDLERS: Final = 4096


class _Encoder:
    """Turns values into JSON-ready trees; one instance per call, never shared."""

    __slots__ = ("digest", "fast", "redactions", "secrets", "strict")

    def __init__(
        self, *, strict: bool = False, digest: Callable[[bytes], str] | None = None
    ) -> None:
        self.strict = strict
        self.fast = _FAST_STRICT if strict else _FAST
        self.digest = digest
        self.redactions = 0
        self.secrets: list[str] = []

    def value(self, v: Any, depth: int, node: Node | None) -> Any:
        tp = type(v)
        if tp in self.fast:
            return v
        handler = _HANDLERS.get(tp)
        if handler is None:
            handler = _resolve(tp)
        return handler(self, v, depth, node)

    def fields(
        self, items: Iterable[tuple[str, Any]], depth: int, node: Node | None
    ) -> dict[str, Any]:
        """Encode str-keyed fields (a dict, a dataclass, a model dump) honouring ignore/redact."""
        out: dict[str, Any] = {}
        fast = self.fast
        rules = node.children if node is not None else None
        key = ""
        item: Any = None
        try:
            if not rules:
                for key, item in items:
                    if key.startswith("$"):
                        out["$" + key] = self.value(item, depth, None)
                    else:
                        out[key] = item if type(item) in fast else self.value(item, depth, None)
                return out
            for key, item in items:
                rule = rules.get(key)
                if rule is None:
                    out[escape(key)] = self.value(item, depth, None)
                elif rule.action == IGNORE:
                    continue
                elif rule.action == REDACT:
                    out[escape(key)] = self.redacted(item, depth, rule)
                else:
                    out[escape(key)] = self.value(item, depth, rule)
        except Refusal as refusal:
            refusal.add(item, ("attr", key))
            raise
        return out

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

    def container(self, v: Any, depth: int) -> int:
        """The depth of v's children, refusing v if it is itself too deep."""
        if depth > MAX_DEPTH:
            raise Refusal(f"is nested deeper than {MAX_DEPTH} levels", too_deep=True)
        return depth + 1

    def items(self, v: Iterable[Any], depth: int, node: Node | None) -> list[Any]:
        each = node.children.get(EACH) if node is not None else None
        out: list[Any] = []
        fast = self.fast
        item: Any = None
        try:
            if each is None:
                for item in v:
                    out.append(item if type(item) in fast else self.value(item, depth, None))
            elif each.action == REDACT:
                for item in v:
                    out.append(self.redacted(item, depth, each))
            elif each.action != IGNORE:
                for item in v:
                    out.append(self.value(item, depth, each))
        except Refusal as refusal:
            # Every earlier element was appended, so the failing one's index is len(out).
            refusal.add(item, ("index", len(out)))
            raise
        return out


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


# Handlers: (encoder, value, depth, node) -> JSON-ready tree.


def _h_str(enc: _Encoder, v: Any, depth: int, node: Node | None) -> Any:
    text = str.__str__(v)
    if enc.strict:
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise Refusal(
                "contains a lone surrogate character, which is not valid Unicode text"
            ) from None
    return text


def _h_int(enc: _Encoder, v: Any, depth: int, node: Node | None) -> Any:
    number = int.__int__(v)
    # 2000 bits is below the smallest digit limit Python can be set to; only then can str() fail.
    if enc.strict and number.bit_length() > 2000:
        try:
            str(number)
        except ValueError:
            raise Refusal(
                "is an integer too long to write in decimal in this process "
                "(see sys.set_int_max_str_digits)"
            ) from None
    return number


def _h_float(enc: _Encoder, v: Any, depth: int, node: Node | None) -> Any:
    number = float.__float__(v)
    if math.isfinite(number):
        return number
    if math.isnan(number):
        raise Refusal("is NaN, which has no stable form")
    raise Refusal("is infinite, which has no stable form")


def _h_dict(enc: _Encoder, v: Any, depth: int, node: Node | None) -> Any:
    inner = enc.container(v, depth)
    if not all(type(k) is str for k in v):
        return _encode_map(enc, v, inner, node)
    if enc.strict:
        for k in v:
            try:
                _h_str(enc, k, inner, None)
            except Refusal as refusal:
                refusal.add(k, ("key", k))
                raise
    return enc.fields(v.items(), inner, node)


def _encode_map(enc: _Encoder, v: Any, depth: int, node: Node | None) -> Any:
    rules = node.children if node is not None else {}
    pairs: list[tuple[str, Any, Any]] = []
    for k, item in v.items():
        try:
            key_tree = enc.value(k, depth, None)
        except Refusal as refusal:
            refusal.add(k, ("key", k))
            raise
        rule = rules.get(k) if type(k) is str else None
        try:
            if rule is None:
                item_tree = enc.value(item, depth, None)
            elif rule.action == IGNORE:
                continue
            elif rule.action == REDACT:
                item_tree = enc.redacted(item, depth, rule)
            else:
                item_tree = enc.value(item, depth, rule)
        except Refusal as refusal:
            refusal.add(item, ("attr" if type(k) is str else "key", k))
            raise
        pairs.append((_write(key_tree), key_tree, item_tree))
    pairs.sort(key=lambda pair: pair[0])
    return {"$map": [[key_tree, item_tree] for _, key_tree, item_tree in pairs]}


def _h_list(enc: _Encoder, v: Any, depth: int, node: Node | None) -> Any:
    return enc.items(v, enc.container(v, depth), node)


def _h_tuple(enc: _Encoder, v: Any, depth: int, node: Node | None) -> Any:
    if hasattr(type(v), "_fields"):  # a namedtuple: a tool may read it by name, a tuple cannot be
        return {"$namedtuple": [class_ref(type(v)), enc.items(v, enc.container(v, depth), node)]}
    return {"$tuple": enc.items(v, enc.container(v, depth), node)}


def _h_set(enc: _Encoder, v: Any, depth: int, node: Node | None) -> Any:
    inner = enc.container(v, depth)
    members: list[tuple[str, Any]] = []
    for item in v:
        try:
            tree = enc.value(item, inner, None)
        except Refusal as refusal:
            refusal.add(item, ("key", item))
            raise
        members.append((_write(tree), tree))
    members.sort(key=lambda member: member[0])
    # A frozenset is hashable and immutable where a set is not: a tool may tell them apart.
    return {"$frozenset" if isinstance(v, frozenset) else "$set": [tree for _, tree in members]}


def _h_bytes(enc: _Encoder, v: Any, depth: int, node: Node | None) -> Any:
    # bytes, bytearray (mutable) and memoryview are three types a tool may tell apart.
    tag = (
        "$bytearray"
        if isinstance(v, bytearray)
        else "$memoryview"
        if isinstance(v, memoryview)
        else "$bytes"
    )
    return {tag: base64.b64encode(bytes(v)).decode("ascii")}


def _h_datetime(enc: _Encoder, v: Any, depth: int, node: Node | None) -> Any:
    if v.utcoffset() is None:
        raise Refusal("is a naive datetime; attach a timezone (datetime.now(timezone.utc))")
    if isinstance(v.tzinfo, dt.timezone):
        return {"$datetime": v.isoformat()}
    # A named zone (ZoneInfo("Europe/Paris")) moves its offset with the seasons where a fixed
    # offset does not: the same instant in each is two values a tool may treat differently.
    return {"$datetime": [v.isoformat(), _zone_name(v.tzinfo)]}


def _zone_name(tz: dt.tzinfo) -> str:
    name = getattr(tz, "key", None) or getattr(tz, "zone", None)  # zoneinfo, pytz
    return str(name) if name else f"{class_ref(type(tz))}:{tz!r}"


def _h_date(enc: _Encoder, v: Any, depth: int, node: Node | None) -> Any:
    return {"$date": v.isoformat()}


def _h_time(enc: _Encoder, v: Any, depth: int, node: Node | None) -> Any:
    return {"$time": v.isoformat()}


def _h_timedelta(enc: _Encoder, v: Any, depth: int, node: Node | None) -> Any:
    return {"$timedelta": [v.days, v.seconds, v.microseconds]}


def _h_decimal(enc: _Encoder, v: Any, depth: int, node: Node | None) -> Any:
    if v.is_nan():
        raise Refusal("is a Decimal NaN, which has no stable form")
    if v.is_infinite():
        raise Refusal("is an infinite Decimal, which has no stable form")
    return {"$decimal": str(v)}


def _h_uuid(enc: _Encoder, v: Any, depth: int, node: Node | None) -> Any:
    return {"$uuid": str(v)}


def _h_path(enc: _Encoder, v: Any, depth: int, node: Node | None) -> Any:
    return {"$path": str(v)}


def _h_enum(enc: _Encoder, v: Any, depth: int, node: Node | None) -> Any:
    inner = enc.container(v, depth)
    return {"$enum": [class_ref(type(v)), enc.value(v.value, inner, None)]}


def _h_model(enc: _Encoder, v: Any, depth: int, node: Node | None) -> Any:
    inner = enc.container(v, depth)
    try:
        dump = v.model_dump(mode="python")
    except Exception as exc:  # noqa: BLE001 - any failure means no stable form; say which
        # The exception text is left out: it may quote a field that is meant to be redacted.
        raise Refusal(
            f"is a {type_name(type(v))} whose model_dump() failed ({type(exc).__name__})"
        ) from None
    if type(dump) is not dict:
        raise Refusal(f"is a {type_name(type(v))} whose model_dump() is not a dict")
    tree = [class_ref(type(v)), _model_fields(enc, dump, inner, node)]
    hidden = _excluded(v)
    if hidden:
        # Fields with exclude=True are left out of model_dump(), yet the tool reads them: two
        # models that differ only there are two actions. (Unchanged when a model has none.)
        tree.append(enc.value(hidden, inner, None))
    return {"$model": tree}


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


def _model_fields(enc: _Encoder, dump: dict[Any, Any], depth: int, node: Node | None) -> Any:
    if all(type(k) is str for k in dump):
        return enc.fields(dump.items(), depth, node)
    return _encode_map(enc, dump, depth, node)


def _h_dataclass(enc: _Encoder, v: Any, depth: int, node: Node | None) -> Any:
    inner = enc.container(v, depth)
    items = ((field.name, getattr(v, field.name)) for field in dataclasses.fields(v))
    return {"$dataclass": [class_ref(type(v)), enc.fields(items, inner, node)]}


def _h_unknown(enc: _Encoder, v: Any, depth: int, node: Node | None) -> Any:
    raise Refusal(unknown_reason(type(v)))


# Checked in order, so that the most specific base wins (datetime is a date, bool an int).
_BY_BASE: Final[tuple[tuple[type, _Handler], ...]] = (
    (str, _h_str),
    (int, _h_int),
    (float, _h_float),
    (dict, _h_dict),
    (list, _h_list),
    (tuple, _h_tuple),
    (set, _h_set),
    (frozenset, _h_set),
    (bytes, _h_bytes),
    (bytearray, _h_bytes),
    (memoryview, _h_bytes),
    (dt.datetime, _h_datetime),
    (dt.date, _h_date),
    (dt.time, _h_time),
    (dt.timedelta, _h_timedelta),
    (decimal.Decimal, _h_decimal),
    (uuid.UUID, _h_uuid),
    (pathlib.PurePath, _h_path),
)


def _resolve(tp: type) -> _Handler:
    handler: _Handler
    # Enums first: an IntEnum is an int and a StrEnum a str, but a tool may tell them apart.
    if issubclass(tp, enum.Enum):
        handler = _h_enum
    elif is_model_type(tp):
        handler = _h_model
    elif dataclasses.is_dataclass(tp):
        handler = _h_dataclass
    else:
        handler = next((h for base, h in _BY_BASE if issubclass(tp, base)), _h_unknown)
    if len(_HANDLERS) >= _MAX_HANDLERS:
        # Classes made on the fly (one per call) must not pile up here forever.
        _HANDLERS.clear()
    _HANDLERS[tp] = handler
    return handler


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
