"""Where in a value: the paths of a tool's ``ignore=`` and ``redact=``, and of a refusal.

``parse_paths`` reads the paths a tool gives (``"customer.email"``, ``"items[].sku"``); ``plan``
turns them into the tree the encoder walks; a ``Refusal`` raised inside an encoder (of arguments,
or of a result to store) carries the path of the value it could not write, for the error the
user sees.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from typing import Any, Final

from .errors import ConfigurationError

# Keeps a huge dict key from turning an error message into a megabyte.
MAX_KEY_REPR: Final = 60

EACH: Final = "[]"
"""Path segment meaning "every element of a list or tuple" (written ``items[]`` or ``items.*``)."""

IGNORE: Final = 1  # what a path asks of the value it names
REDACT: Final = 2

# --- Refusals and their paths ---------------------------------------------------------------------

# A step from a container to one of its parts: ("attr", name), ("index", i) or ("key", key).
Step = tuple[str, Any]
CYCLE: Final = "contains a reference cycle"  # a too-deep refusal's reason once settled on a cycle


class Refusal(Exception):
    """Raised deep inside an encoder (of arguments, or of a result); each container adds its
    step while the error unwinds.

    Building the path only on the way out keeps the successful path free of string work.
    """

    def __init__(self, reason: str, *, too_deep: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.too_deep = too_deep
        # (id of the object reached, step that reached it), innermost first.
        self.trail: list[tuple[int, Step]] = []
        self.settled = False

    def add(self, obj: Any, step: Step) -> None:
        self.trail.append((id(obj), step))

    def settle(self) -> None:
        """Fix the reason; a cycle shows up as an object met twice on the way down."""
        if self.settled:
            return
        self.settled = True
        if not self.too_deep:
            return
        down = self.trail[::-1]
        seen: set[int] = set()
        for i, (obj_id, _) in enumerate(down):
            if obj_id in seen:
                self.reason = CYCLE
                self.trail = down[: i + 1][::-1]
                return
            seen.add(obj_id)

    def path(self) -> str:
        return format_path([step for _, step in reversed(self.trail)])


def format_path(steps: Iterable[Step]) -> str:
    out: list[str] = []
    for kind, part in steps:
        if kind == "index":
            out.append(f"[{part}]")
        elif kind == "attr" and not out:
            out.append(str(part))  # the argument's name leads, however it is spelled
        elif kind == "attr" and isinstance(part, str) and part.isidentifier():
            out.append(f".{part}")
        else:
            text = repr(part)
            if len(text) > MAX_KEY_REPR:
                text = text[: MAX_KEY_REPR - 3] + "..."
            out.append(f"[{text}]")
    return "".join(out)


def type_name(tp: type) -> str:
    if tp.__module__ == "builtins":
        return tp.__qualname__
    return f"{tp.__module__}.{tp.__qualname__}"


def class_ref(tp: type) -> str:
    return f"{tp.__module__}:{tp.__qualname__}"


def is_model_type(tp: type) -> bool:
    """A pydantic model class (or one shaped like it)."""
    return callable(getattr(tp, "model_dump", None)) and hasattr(tp, "model_fields")


def unknown_reason(tp: type) -> str:
    printer: object = tp.__repr__
    name = tp.__qualname__
    if printer is object.__repr__:
        article = "an" if name[:1].lower() in "aeiou" else "a"
        return f"is {article} {name} object whose only printed form is its memory address"
    return f"is a {type_name(tp)}, which has no stable canonical form"


def escape(key: str) -> str:
    return "$" + key if key.startswith("$") else key


# --- Field paths for ignore= and redact= ----------------------------------------------------------


def parse_paths(paths: Sequence[str]) -> tuple[tuple[str, ...], ...]:
    """Split field paths like ``"meta.request_id"`` or ``"items[].id"`` into segments.

    Every-element steps (``[]`` or ``*``) become :data:`EACH`. Raises
    :class:`~call4agents.model.errors.ConfigurationError` on bad syntax, so mistakes show up when
    the tool is declared rather than as a field that silently never matches.
    """
    if isinstance(paths, str):
        raise ConfigurationError(
            f"field paths must be a list or tuple of strings, not the string {paths!r}; "
            f"write ({paths!r},)."
        )
    return tuple(parse_path(path) for path in paths)


def bad_path(path: object, why: str) -> ConfigurationError:
    return ConfigurationError(
        f"bad field path {path!r}: {why}. Write paths like 'timestamp', 'meta.request_id' "
        "or 'items[].id'."
    )


def parse_path(path: object) -> tuple[str, ...]:
    if not isinstance(path, str):
        raise bad_path(path, f"it is a {type(path).__name__}, not a string")
    if not path:
        raise bad_path(path, "it is empty")
    segments: list[str] = []
    for part in path.split("."):
        if part == "*":
            segments.append(EACH)
            continue
        name = part
        each = 0
        while name.endswith(EACH):
            name = name[: -len(EACH)]
            each += 1
        if not name:
            raise bad_path(path, "it has an empty name (look for '..', a leading '.' or '[]')")
        if any(ch in name for ch in "[]*"):
            raise bad_path(path, f"{name!r} is not a name ('[]' may only follow a name)")
        if name != name.strip():
            raise bad_path(path, f"{name!r} has spaces around it")
        segments.append(name)
        segments.extend([EACH] * each)
    if segments[0] == EACH:
        raise bad_path(path, "it must start with an argument name")
    return tuple(segments)


class Node:
    """One step of the ignore/redact tree: what to do here, and the rules below."""

    __slots__ = ("action", "children")

    def __init__(self) -> None:
        self.action = 0
        self.children: dict[str, Node] = {}


class Plan:
    __slots__ = ("has_redact", "root")

    def __init__(self, root: Node, has_redact: bool) -> None:
        self.root = root
        self.has_redact = has_redact


@functools.lru_cache(maxsize=256)
def plan_for(ignore: tuple[str, ...], redact: tuple[str, ...]) -> Plan:
    root = Node()
    marked: dict[tuple[str, ...], int] = {}
    for action, paths in ((IGNORE, ignore), (REDACT, redact)):
        for path, segments in zip(paths, parse_paths(paths), strict=True):
            if marked.get(segments, action) != action:
                raise ConfigurationError(
                    f"field path {path!r} is named in both ignore= and redact=; pick one."
                )
            marked[segments] = action
            node = root
            for segment in segments:
                node = node.children.setdefault(segment, Node())
            node.action = action
    prune(root, inside_redacted=False)
    return Plan(root, has_redact=bool(redact))


def prune(node: Node, *, inside_redacted: bool) -> None:
    """Drop rules that cannot matter, so an encoded redacted value never holds a redaction.

    Below an ignored field nothing is looked at; below a redacted one only ignores still count
    (they change which digest the value gets), while nested redactions are already covered.
    """
    for name, child in list(node.children.items()):
        if child.action == IGNORE:
            child.children.clear()
        elif inside_redacted and child.action == REDACT:
            child.action = 0
        prune(child, inside_redacted=inside_redacted or child.action == REDACT)
        if not child.action and not child.children:
            del node.children[name]
