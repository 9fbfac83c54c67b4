"""One walk of a Python value, type by type, into a tree that json can write.

A tool's canonical arguments (``canonical.py``) and a stored result (``codec.py``) are both such
a walk: types are told apart in one order, containers are walked and their depth counted one way,
and what cannot be written raises a :class:`~.paths.Refusal` that collects its path on the way
out. :class:`Walker` writes the types both write alike; each subclass writes the rest its own way
(an argument's NaN is refused where a result's is stored, for one).

Non-JSON types become single-key objects whose key starts with ``$``, such as
``{"$tuple": [...]}``; a user's own keys starting with ``$`` get one more ``$`` so they can never
pass for such a tag.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import enum
import pathlib
import uuid
from collections.abc import Callable, Iterable
from typing import Any, ClassVar, Final

from .paths import EACH, IGNORE, REDACT, Node, Refusal, class_ref, escape, is_model_type

Handler = Callable[["Walker", Any, int, "Node | None"], Any]
_MAX_HANDLERS: Final = 4096

# The method that writes each type. Checked in order, so that the most specific base wins
# (datetime is a date, bool an int); enums, models and dataclasses are told apart before these.
_BY_BASE: Final[tuple[tuple[type, str], ...]] = (
    (str, "on_str"),
    (int, "on_int"),
    (float, "on_float"),
    (dict, "on_dict"),
    (list, "on_list"),
    (tuple, "on_tuple"),
    (set, "on_set"),
    (frozenset, "on_set"),
    (bytes, "on_bytes"),
    (bytearray, "on_bytes"),
    (memoryview, "on_bytes"),
    (dt.datetime, "on_datetime"),
    (dt.date, "on_date"),
    (dt.time, "on_time"),
    (dt.timedelta, "on_timedelta"),
    (decimal.Decimal, "on_decimal"),
    (uuid.UUID, "on_uuid"),
    (pathlib.PurePath, "on_path"),
)


class Walker:
    """Turns a value into a JSON-ready tree, given its depth and its ignore/redact rules (a node).

    A subclass's ``__init__`` sets the four attributes below (slots, being read at every value:
    cheaper than class attributes), and the subclass defines the handlers this class does not:
    ``on_float``, ``on_bytes``, ``on_datetime``, ``on_path``, ``on_model`` and
    ``on_unknown``.
    """

    __slots__ = ("fast", "handlers", "max_depth", "strict")
    fast: frozenset[type]
    """Types that are their own tree."""
    handlers: dict[type, Handler]
    """The handler per concrete type, filled on first sight (what a type needs depends only on
    it), shared by the walkers of one subclass."""
    max_depth: int
    strict: bool
    """Refuse what json cannot write, a lone surrogate or an int past the digit limit (the
    canonical arguments' second walk, which finds where the first one's text failed)."""
    # How a str key of a dict with other keys too shows in a refusal's path: as a name, the way
    # ignore= and redact= paths name it ("m.ts"), or quoted ("m['ts']").
    str_key_step: ClassVar[str] = "attr"

    def value(self, v: Any, depth: int, node: Node | None) -> Any:
        tp = type(v)
        if tp in self.fast:
            return v
        handler = self.handlers.get(tp)
        if handler is None:
            handler = self.resolve(tp)
        return handler(self, v, depth, node)

    def resolve(self, tp: type) -> Handler:
        name: str
        # Enums first: an IntEnum is an int and a StrEnum a str, but a tool may tell them apart.
        if issubclass(tp, enum.Enum):
            name = "on_enum"
        elif is_model_type(tp):
            name = "on_model"
        elif dataclasses.is_dataclass(tp):
            name = "on_dataclass"
        else:
            name = next((n for base, n in _BY_BASE if issubclass(tp, base)), "on_unknown")
        handler: Handler = getattr(type(self), name)
        if len(self.handlers) >= _MAX_HANDLERS:
            # Classes made on the fly (one per call) must not pile up here forever.
            self.handlers.clear()
        self.handlers[tp] = handler
        return handler

    def container(self, depth: int) -> int:
        """The depth of a container's children, refusing it if it is itself too deep."""
        if depth > self.max_depth:
            raise Refusal(f"is nested deeper than {self.max_depth} levels", too_deep=True)
        return depth + 1

    def redacted(self, v: Any, depth: int, node: Node) -> Any:
        """What stands for a value a redact= rule names; only a tool's arguments have such rules."""
        raise NotImplementedError

    def fields(
        self, items: Iterable[tuple[str, Any]], depth: int, node: Node | None
    ) -> dict[str, Any]:
        """Encode str-keyed fields (a dict, a dataclass, a model) honouring ignore/redact."""
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

    def pairs(self, v: dict[Any, Any], depth: int, node: Node | None) -> list[list[Any]]:
        """A dict whose keys are not all str, as ``[key, value]`` trees."""
        rules = node.children if node is not None else {}
        out: list[list[Any]] = []
        for k, item in v.items():
            try:
                key_tree = self.value(k, depth, None)
            except Refusal as refusal:
                refusal.add(k, ("key", k))
                raise
            rule = rules.get(k) if type(k) is str else None
            try:
                if rule is None:
                    item_tree = self.value(item, depth, None)
                elif rule.action == IGNORE:
                    continue
                elif rule.action == REDACT:
                    item_tree = self.redacted(item, depth, rule)
                else:
                    item_tree = self.value(item, depth, rule)
            except Refusal as refusal:
                refusal.add(item, (self.str_key_step if type(k) is str else "key", k))
                raise
            out.append([key_tree, item_tree])
        return out

    # Handlers: (walker, value, depth, node) -> JSON-ready tree.

    def on_str(self, v: Any, depth: int, node: Node | None) -> Any:
        text = str.__str__(v)  # a str subclass is written as a plain str
        if self.strict:
            try:
                text.encode("utf-8")
            except UnicodeEncodeError:
                raise Refusal(
                    "contains a lone surrogate character, which is not valid Unicode text"
                ) from None
        return text

    def on_int(self, v: Any, depth: int, node: Node | None) -> Any:
        number = int.__int__(v)
        # 2000 bits is under the smallest digit limit Python allows: only past it can str() fail.
        if number.bit_length() > 2000:
            return self.long_int(number)
        return number

    def long_int(self, number: int) -> Any:
        if self.strict:
            try:
                str(number)
            except ValueError:
                raise Refusal(
                    "is an integer too long to write in decimal in this process "
                    "(see sys.set_int_max_str_digits)"
                ) from None
        return number

    def on_dict(self, v: Any, depth: int, node: Node | None) -> Any:
        inner = self.container(depth)
        if not all(type(k) is str for k in v):
            return {"$map": self.pairs(v, inner, node)}
        if self.strict:
            for k in v:
                try:
                    self.on_str(k, inner, None)
                except Refusal as refusal:
                    refusal.add(k, ("key", k))
                    raise
        return self.fields(v.items(), inner, node)

    def on_list(self, v: Any, depth: int, node: Node | None) -> Any:
        return self.items(v, self.container(depth), node)

    def on_tuple(self, v: Any, depth: int, node: Node | None) -> Any:
        items = self.items(v, self.container(depth), node)
        if hasattr(type(v), "_fields"):  # a namedtuple: a tool may read it by name, a tuple cannot
            return {"$namedtuple": [class_ref(type(v)), items]}
        return {"$tuple": items}

    def on_set(self, v: Any, depth: int, node: Node | None) -> Any:
        # A frozenset is hashable and immutable where a set is not: a tool may tell them apart.
        tag = "$frozenset" if isinstance(v, frozenset) else "$set"
        return {tag: self.items(v, self.container(depth), None)}

    def on_date(self, v: Any, depth: int, node: Node | None) -> Any:
        return {"$date": v.isoformat()}

    def on_time(self, v: Any, depth: int, node: Node | None) -> Any:
        return {"$time": v.isoformat()}

    def on_timedelta(self, v: Any, depth: int, node: Node | None) -> Any:
        return {"$timedelta": [v.days, v.seconds, v.microseconds]}

    def on_decimal(self, v: Any, depth: int, node: Node | None) -> Any:
        return {"$decimal": str(v)}

    def on_uuid(self, v: Any, depth: int, node: Node | None) -> Any:
        return {"$uuid": str(v)}

    def on_enum(self, v: Any, depth: int, node: Node | None) -> Any:
        return {"$enum": [class_ref(type(v)), self.value(v.value, self.container(depth), None)]}

    def on_dataclass(self, v: Any, depth: int, node: Node | None) -> Any:
        inner = self.container(depth)
        items = ((field.name, getattr(v, field.name)) for field in dataclasses.fields(v))
        return {"$dataclass": [class_ref(type(v)), self.fields(items, inner, node)]}
