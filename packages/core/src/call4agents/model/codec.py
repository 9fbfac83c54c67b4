"""Store a tool's result as JSON text and give back a value of the same type on a repeat.

A result that is already plain JSON (str-keyed dicts, lists, str, int, finite floats, bool, None)
is stored as that JSON, so the common case costs one ``json.dumps`` and one ``json.loads`` plus a
type walk. Anything else is stored inside an envelope, ``{"$tagged": <tree>}``, where each
non-JSON value is a single-key object such as ``{"$tuple": [...]}`` and a user's own keys that start
with ``$`` get one more ``$``. Plain JSON never starts with ``{"$``, so the decoder knows which kind
of text it has from its first three characters.

Classes (dataclasses, pydantic models, enums, named tuples, path types) are stored by
``module:QualName`` and re-created on decode only if that name still imports to a class of the
right kind; otherwise the plain decoded data is returned. Nothing is ever called that is not such
a class.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import decimal
import enum
import importlib
import json
import math
import pathlib
import uuid
from collections.abc import Callable, Iterable
from typing import Any, Final

from .canonical import json_writer
from .paths import CYCLE, Refusal, class_ref, is_model_type

__all__ = ["MAX_DEPTH", "ResultEncodingError", "decode_result", "encode_result"]

MAX_DEPTH: Final = 100
"""Deepest container nesting a result may have (deeper is refused, as is a reference cycle)."""

_ENVELOPE: Final = "$tagged"
_TAGGED_PREFIX: Final = '{"$'
# Ints this long are stored in hex: the process's digit limit could make decimal fail to write.
_BIG_INT_BITS: Final = 2000

_NoneType = type(None)
# Floats count as plain here: a NaN or infinity makes the (allow_nan=False) writer raise, and the
# value is then stored tagged instead; that keeps the walk from checking every float.
_PLAIN_LEAVES: Final[frozenset[type]] = frozenset((str, int, float, bool, _NoneType))
_FAST: Final[frozenset[type]] = frozenset((str, bool, _NoneType))


class ResultEncodingError(ValueError):
    """A result has no storable form or is over the size limit; ``why`` says which, briefly."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


_write: Final = json_writer(sort_keys=False)
# For text json can write but UTF-8 cannot (lone surrogates): \u escapes round-trip them.
_write_ascii: Final = json_writer(sort_keys=False, ascii_only=True)


# --- Encoding -------------------------------------------------------------------------------------


def encode_result(value: Any, *, max_bytes: int) -> str:
    """JSON text for ``value``; raises :class:`ResultEncodingError` if it cannot be stored."""
    text: str | None = None
    tree: Any = value
    if _is_plain(value, 1):
        try:
            text = _write(value)
        except ValueError:
            text = None  # NaN, infinity or an int too long for decimal: tags store those
    if text is None:
        tree = {_ENVELOPE: _tag_root(value)}
        text = _write(tree)
    if text.isascii():
        size = len(text)
    else:
        try:
            size = len(text.encode("utf-8"))
        except UnicodeEncodeError:
            text = _write_ascii(tree)
            size = len(text)
    if size > max_bytes:
        raise ResultEncodingError(f"result is {size:,} bytes, over the {max_bytes:,}-byte limit")
    return text


def _is_plain(value: Any, depth: int) -> bool:
    """True if json.loads(json.dumps(value)) gives back value with the same types.

    Non-finite floats and ints too long for decimal pass this walk but make the writer raise.
    """
    tp = type(value)
    if tp is dict:
        if depth > MAX_DEPTH:
            return False
        for key, item in value.items():
            if type(key) is not str or key.startswith("$"):
                return False
            if type(item) not in _PLAIN_LEAVES and not _is_plain(item, depth + 1):
                return False
        return True
    if tp is list:
        if depth > MAX_DEPTH:
            return False
        for item in value:
            if type(item) not in _PLAIN_LEAVES and not _is_plain(item, depth + 1):
                return False
        return True
    return tp in _PLAIN_LEAVES


def _tag_root(value: Any) -> Any:
    try:
        return _tag(value, 1)
    except Refusal as refusal:
        refusal.add(value, ("attr", "result"))  # so a cycle back to the root is seen as one
        refusal.settle()
        raise ResultEncodingError(_why(refusal)) from None


def _why(refusal: Refusal) -> str:
    """What the error says: a refusal's reason and the path to what was refused, which starts
    at the result itself (``result.conn[0]``)."""
    if refusal.too_deep:  # a cycle has the path to it; mere depth none
        where = f" at {refusal.path()}" if refusal.reason == CYCLE else ""
        return f"result {refusal.reason}{where}"
    if len(refusal.trail) == 1:  # only the root's own entry
        return f"result is {refusal.reason}, which cannot be stored"
    return f"result contains {refusal.reason} at {refusal.path()}, which cannot be stored"


def _tag(value: Any, depth: int) -> Any:
    tp = type(value)
    if tp in _FAST:
        return value
    handler = _TAGGERS.get(tp)
    if handler is None:
        handler = _resolve(tp)
    return handler(value, depth)


def _inner(depth: int) -> int:
    if depth > MAX_DEPTH:
        raise Refusal(f"is nested deeper than {MAX_DEPTH} levels", too_deep=True)
    return depth + 1


def _tag_fields(items: Iterable[tuple[str, Any]], depth: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    key = ""
    item: Any = None
    try:
        for key, item in items:
            out["$" + key if key.startswith("$") else key] = _tag(item, depth)
    except Refusal as refusal:
        refusal.add(item, ("attr", key))
        raise
    return out


def _tag_items(values: Iterable[Any], depth: int) -> list[Any]:
    out: list[Any] = []
    item: Any = None
    try:
        for item in values:
            out.append(_tag(item, depth))
    except Refusal as refusal:
        refusal.add(item, ("index", len(out)))
        raise
    return out


# Taggers: (value, depth) -> JSON-ready tree.


def _t_str(value: Any, depth: int) -> Any:
    return str.__str__(value)  # a str subclass comes back as a plain str


def _t_int(value: Any, depth: int) -> Any:
    number = int.__int__(value)
    if number.bit_length() > _BIG_INT_BITS:
        return {"$int": format(number, "x")}
    return number


def _t_float(value: Any, depth: int) -> Any:
    number = float.__float__(value)
    if math.isfinite(number):
        return number
    return {"$float": "nan" if math.isnan(number) else ("inf" if number > 0 else "-inf")}


def _t_dict(value: Any, depth: int) -> Any:
    inner = _inner(depth)
    if all(type(key) is str for key in value):
        return _tag_fields(value.items(), inner)
    pairs: list[list[Any]] = []
    for key, item in value.items():
        try:
            key_tree = _tag(key, inner)
        except Refusal as refusal:
            refusal.add(key, ("key", key))
            raise
        try:
            pairs.append([key_tree, _tag(item, inner)])
        except Refusal as refusal:
            refusal.add(item, ("key", key))
            raise
    return {"$map": pairs}


def _t_list(value: Any, depth: int) -> Any:
    return _tag_items(value, _inner(depth))


def _t_tuple(value: Any, depth: int) -> Any:
    items = _tag_items(value, _inner(depth))
    if hasattr(type(value), "_fields"):  # a named tuple
        return {"$namedtuple": [class_ref(type(value)), items]}
    return {"$tuple": items}


def _t_set(value: Any, depth: int) -> Any:
    tag = "$frozenset" if isinstance(value, frozenset) else "$set"
    return {tag: _tag_items(value, _inner(depth))}


def _t_bytes(value: Any, depth: int) -> Any:
    tag = "$bytearray" if isinstance(value, bytearray) else "$bytes"
    return {tag: base64.b64encode(bytes(value)).decode("ascii")}


def _t_datetime(value: Any, depth: int) -> Any:
    zone = getattr(value.tzinfo, "key", None)
    if isinstance(zone, str) and type(value.tzinfo).__name__ == "ZoneInfo":
        # isoformat keeps only the offset; the zone name lets later arithmetic follow DST.
        return {"$datetime": [value.isoformat(), zone]}
    return {"$datetime": value.isoformat()}


def _t_date(value: Any, depth: int) -> Any:
    return {"$date": value.isoformat()}


def _t_time(value: Any, depth: int) -> Any:
    return {"$time": value.isoformat()}


def _t_timedelta(value: Any, depth: int) -> Any:
    return {"$timedelta": [value.days, value.seconds, value.microseconds]}


def _t_decimal(value: Any, depth: int) -> Any:
    return {"$decimal": str(value)}


def _t_uuid(value: Any, depth: int) -> Any:
    return {"$uuid": str(value)}


def _t_path(value: Any, depth: int) -> Any:
    return {"$path": [class_ref(type(value)), str(value)]}


def _t_enum(value: Any, depth: int) -> Any:
    return {"$enum": [class_ref(type(value)), _tag(value.value, _inner(depth))]}


def _t_model(value: Any, depth: int) -> Any:
    tp = type(value)
    inner = _inner(depth)
    # Field by field rather than model_dump(), so nested models, datetimes and tuples keep their
    # types and come back as they were.
    items: list[tuple[str, Any]] = [(name, getattr(value, name)) for name in tp.model_fields]
    extra = getattr(value, "model_extra", None)
    if isinstance(extra, dict):
        items.extend(extra.items())
    fields_set = sorted(getattr(value, "model_fields_set", ()))
    return {"$model": [class_ref(tp), _tag_fields(items, inner), fields_set]}


def _t_dataclass(value: Any, depth: int) -> Any:
    inner = _inner(depth)
    items = ((field.name, getattr(value, field.name)) for field in dataclasses.fields(value))
    return {"$dataclass": [class_ref(type(value)), _tag_fields(items, inner)]}


def _t_unknown(value: Any, depth: int) -> Any:
    raise Refusal(f"a {type(value).__qualname__} object")


_Tagger = Callable[[Any, int], Any]
# Most specific base first: datetime is a date, bool an int.
_BY_BASE: Final[tuple[tuple[type, _Tagger], ...]] = (
    (str, _t_str),
    (int, _t_int),
    (float, _t_float),
    (dict, _t_dict),
    (list, _t_list),
    (tuple, _t_tuple),
    (set, _t_set),
    (frozenset, _t_set),
    (bytes, _t_bytes),
    (bytearray, _t_bytes),
    (memoryview, _t_bytes),
    (dt.datetime, _t_datetime),
    (dt.date, _t_date),
    (dt.time, _t_time),
    (dt.timedelta, _t_timedelta),
    (decimal.Decimal, _t_decimal),
    (uuid.UUID, _t_uuid),
    (pathlib.PurePath, _t_path),
)
# What a value needs depends only on its type, so the choice is cached per type.
_TAGGERS: dict[type, _Tagger] = {}
_MAX_TAGGERS: Final = 4096


def _resolve(tp: type) -> _Tagger:
    tagger: _Tagger
    if issubclass(tp, enum.Enum):  # before int and str: IntEnum, StrEnum
        tagger = _t_enum
    elif is_model_type(tp):
        tagger = _t_model
    elif dataclasses.is_dataclass(tp):
        tagger = _t_dataclass
    else:
        tagger = next((t for base, t in _BY_BASE if issubclass(tp, base)), _t_unknown)
    if len(_TAGGERS) >= _MAX_TAGGERS:
        _TAGGERS.clear()  # classes made on the fly must not pile up here forever
    _TAGGERS[tp] = tagger
    return tagger


# --- Decoding -------------------------------------------------------------------------------------


# The decoder's scanner, called directly: ``json.loads`` spends most of a small result's decode
# (about a microsecond, on every repeat) in the Python layers around it.
_scan: Final = json.JSONDecoder().scan_once  # type: ignore[attr-defined]


def decode_result(text: str) -> Any:
    """The value :func:`encode_result` stored as ``text``."""
    if text.startswith(_TAGGED_PREFIX):
        return json.loads(text, object_hook=_untag)
    try:
        value, end = _scan(text, 0)
    except StopIteration:
        end = -1
    if end != len(text):  # not one bare JSON value (padding, trailing text): json says why
        return json.loads(text)
    return value


def _untag(obj: dict[str, Any]) -> Any:
    """json object_hook: runs innermost first, so a tag's contents are already decoded."""
    if len(obj) == 1:
        ((key, data),) = obj.items()
        if key.startswith("$") and not key.startswith("$$"):
            decoder = _DECODERS.get(key)
            return decoder(data) if decoder is not None else obj
    if any(key.startswith("$") for key in obj):
        return {key[1:] if key.startswith("$") else key: item for key, item in obj.items()}
    return obj


def _import_class(ref: Any) -> type | None:
    """The class named ``module:QualName``, or None if it no longer imports to a class."""
    if not isinstance(ref, str):
        return None
    module_name, _, qualname = ref.partition(":")
    if not module_name or not qualname or "<" in qualname:
        return None
    try:
        found: Any = importlib.import_module(module_name)
        for part in qualname.split("."):
            found = getattr(found, part)
    except Exception:  # noqa: BLE001 - a moved or broken class means: give the plain data back
        return None
    return found if isinstance(found, type) else None


def _d_datetime(data: Any) -> Any:
    if isinstance(data, str):
        return dt.datetime.fromisoformat(data)
    stamp = dt.datetime.fromisoformat(data[0])
    try:
        import zoneinfo

        return stamp.astimezone(zoneinfo.ZoneInfo(data[1]))
    except Exception:  # noqa: BLE001 - zone data missing here: the fixed offset is still right
        return stamp


def _d_timedelta(data: Any) -> Any:
    days, seconds, microseconds = data
    return dt.timedelta(days=days, seconds=seconds, microseconds=microseconds)


def _d_path(data: Any) -> Any:
    cls = _import_class(data[0])
    if cls is None or not issubclass(cls, pathlib.PurePath):
        return pathlib.PurePath(data[1])
    try:
        return cls(data[1])
    except NotImplementedError:  # a concrete path of the other OS: keep its pure flavour
        if issubclass(cls, pathlib.PureWindowsPath):
            return pathlib.PureWindowsPath(data[1])
        return pathlib.PurePosixPath(data[1])


def _d_enum(data: Any) -> Any:
    cls = _import_class(data[0])
    if cls is not None and issubclass(cls, enum.Enum):
        try:
            return cls(data[1])
        except ValueError:  # the member is gone: the value is what is left
            pass
    return data[1]


def _d_namedtuple(data: Any) -> Any:
    cls = _import_class(data[0])
    if cls is not None and issubclass(cls, tuple) and hasattr(cls, "_fields"):
        try:
            return cls(*data[1])
        except TypeError:  # fields changed since it was stored
            pass
    return tuple(data[1])


def _d_dataclass(data: Any) -> Any:
    cls = _import_class(data[0])
    values: dict[str, Any] = data[1]
    if cls is None or not dataclasses.is_dataclass(cls):
        return values
    fields = dataclasses.fields(cls)
    try:
        made = cls(**{f.name: values[f.name] for f in fields if f.init and f.name in values})
        for f in fields:
            if not f.init and f.name in values:
                object.__setattr__(made, f.name, values[f.name])  # frozen classes too
    except Exception:  # noqa: BLE001 - the class changed since it was stored: plain data back
        return values
    return made


def _d_model(data: Any) -> Any:
    cls = _import_class(data[0])
    values: dict[str, Any] = data[1]
    construct = getattr(cls, "model_construct", None)
    if cls is None or not is_model_type(cls) or not callable(construct):
        return values
    try:
        # model_construct, not model_validate: the values are already the right types (they were
        # the model's own), it accepts field names even on aliased models, and it does not run
        # validators a second time.
        return construct(_fields_set=set(data[2]), **values)
    except Exception:  # noqa: BLE001 - the class changed since it was stored: plain data back
        return values


_DECODERS: Final[dict[str, Callable[[Any], Any]]] = {
    _ENVELOPE: lambda data: data,
    "$tuple": tuple,
    "$set": set,
    "$frozenset": frozenset,
    "$map": lambda data: {key: item for key, item in data},
    "$float": float,
    "$int": lambda data: int(data, 16),
    "$bytes": lambda data: base64.b64decode(data),
    "$bytearray": lambda data: bytearray(base64.b64decode(data)),
    "$datetime": _d_datetime,
    "$date": dt.date.fromisoformat,
    "$time": dt.time.fromisoformat,
    "$timedelta": _d_timedelta,
    "$decimal": decimal.Decimal,
    "$uuid": uuid.UUID,
    "$path": _d_path,
    "$enum": _d_enum,
    "$namedtuple": _d_namedtuple,
    "$dataclass": _d_dataclass,
    "$model": _d_model,
}
