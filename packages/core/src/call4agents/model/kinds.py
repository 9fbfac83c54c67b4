"""The side-effect kinds a tool declares: what it may do to the world, which sets its defaults."""

from __future__ import annotations

from typing import Literal

Kind = Literal["none", "read", "write", "irreversible"]
KINDS: tuple[str, ...] = ("none", "read", "write", "irreversible")
