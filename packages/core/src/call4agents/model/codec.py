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
from collections.abc import Callable
from typing import Any, Final

from .canonical import json_writer
from .paths import CYCLE, Node, Refusal, class_ref, is_model_type
from .walk import Walker

__all__ = ["MAX_DEPTH", "ResultEncodingError", "decode_result", "encode_result"]

MAX_DEPTH: Final = 100
"""Deepest container nesting a result may have (deeper is refused, as is a reference cycle)."""

_ENVELOPE: Final = "$tagged"
_TAGGED_PREFIX: Final = '{"$'

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
        return _TAGGER.value(value, 1, None)
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


class _Tagger(Walker):
    """The walk of a result, for what decodes back to the same type; Walker writes the rest."""

    __slots__ = ()
    str_key_step = "key"  # as result paths have always shown them

    def __init__(self) -> None:
        self.fast = _FAST
        self.handlers = {}
        self.max_depth = MAX_DEPTH
        self.strict = False  # what json cannot write is stored tagged (ints) or escaped (text)

    def long_int(self, number: int) -> Any:
        return {"$int": format(number, "x")}  # hex has no digit limit

    def on_float(self, v: Any, depth: int, node: Node | None) -> Any:
        number = float.__float__(v)
        if math.isfinite(number):
            return number
        return {"$float": "nan" if math.isnan(number) else ("inf" if number > 0 else "-inf")}

    def on_bytes(self, v: Any, depth: int, node: Node | None) -> Any:
        tag = "$bytearray" if isinstance(v, bytearray) else "$bytes"
        return {tag: base64.b64encode(bytes(v)).decode("ascii")}

    def on_datetime(self, v: Any, depth: int, node: Node | None) -> Any:
        zone = getattr(v.tzinfo, "key", None)
        if isinstance(zone, str) and type(v.tzinfo).__name__ == "ZoneInfo":
            # isoformat keeps only the offset; the zone name lets later arithmetic follow DST.
            return {"$datetime": [v.isoformat(), zone]}
        return {"$datetime": v.isoformat()}

    def on_path(self, v: Any, depth: int, node: Node | None) -> Any:
        tp = type(v)
        # pathlib's own classes by the module that names them publicly: Python 3.13 defines
        # them in pathlib._local, which older Pythons reading the result do not have.
        public = getattr(pathlib, tp.__qualname__, None) is tp
        return {"$path": [f"pathlib:{tp.__qualname__}" if public else class_ref(tp), str(v)]}

    def on_model(self, v: Any, depth: int, node: Node | None) -> Any:
        tp = type(v)
        inner = self.container(depth)
        # Field by field rather than model_dump(), so nested models, datetimes and tuples keep
        # their types and come back as they were.
        items: list[tuple[str, Any]] = [(name, getattr(v, name)) for name in tp.model_fields]
        extra = getattr(v, "model_extra", None)
        if isinstance(extra, dict):
            items.extend(extra.items())
        fields_set = sorted(getattr(v, "model_fields_set", ()))
        return {"$model": [class_ref(tp), self.fields(items, inner, None), fields_set]}

    def on_unknown(self, v: Any, depth: int, node: Node | None) -> Any:
        raise Refusal(f"a {type(v).__qualname__} object")


_TAGGER: Final = _Tagger()  # it keeps nothing between values, so one serves every call


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
