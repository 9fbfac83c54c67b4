"""A PostgreSQL connection through libpq itself, by ``ctypes``: the lean route's driver.

``call4agents doubt`` is run by cron jobs and CI steps in a new process each time. Importing
psycopg costs ~170 ms there (its adapters, its types, asyncio), several times the command's own
work; loading the libpq that psycopg itself would load costs ~10 ms. The lean route needs little
of a driver: open a connection with given settings, run a statement with text parameters, read
text values. That is all this module does.

Which libpq: the one psycopg's binary package bundles (what the full route connects with), else
the system's ``libpq.so.5`` as the dynamic loader finds it. Where neither loads, ``connect``
raises ``LibpqMissing`` and the caller takes the full route.
"""

from __future__ import annotations

import ctypes
import importlib.util
import sys
from collections.abc import Mapping, Sequence
from functools import cache
from pathlib import Path

_CONNECTION_OK = 0
_RESULT_OK = (1, 2)  # PGRES_COMMAND_OK, PGRES_TUPLES_OK
_SEVERITY, _PRIMARY = ord("S"), ord("M")  # error fields: severity, primary message
_SYSTEM_NAMES = {"linux": ("libpq.so.5",), "darwin": ("libpq.5.dylib",), "win32": ("libpq.dll",)}
_p = ctypes.c_void_p
_s = ctypes.c_char_p
_i = ctypes.c_int
# The functions used, with their C signatures: (name, result, arguments).
_SIGNATURES: tuple[tuple[str, object, tuple[object, ...]], ...] = (
    ("PQconnectdbParams", _p, (ctypes.POINTER(_s), ctypes.POINTER(_s), _i)),
    ("PQstatus", _i, (_p,)),
    ("PQerrorMessage", _s, (_p,)),
    ("PQfinish", None, (_p,)),
    ("PQexecParams", _p, (_p, _s, _i, _p, ctypes.POINTER(_s), _p, _p, _i)),
    ("PQresultStatus", _i, (_p,)),
    ("PQresultErrorMessage", _s, (_p,)),
    ("PQresultErrorField", _s, (_p, _i)),
    ("PQntuples", _i, (_p,)),
    ("PQnfields", _i, (_p,)),
    ("PQgetvalue", _s, (_p, _i, _i)),
    ("PQgetisnull", _i, (_p, _i, _i)),
    ("PQclear", None, (_p,)),
    ("PQconninfo", _p, (_p,)),
    ("PQconninfoFree", None, (_p,)),
)


class LibpqMissing(Exception):
    """No libpq could be loaded here."""


class PgError(Exception):
    """A fault the server or libpq reported, as its one-line message."""


class _Option(ctypes.Structure):
    """libpq's ``PQconninfoOption``: one setting of a connection."""

    _fields_ = [
        ("keyword", _s),
        ("envvar", _s),
        ("compiled", _s),
        ("val", _s),
        ("label", _s),
        ("dispchar", _s),
        ("dispsize", _i),
    ]


def _candidates() -> list[str]:
    """Where a libpq may be, in the order psycopg would pick: its binary package's own copy
    (found without importing the package, which refuses to load before psycopg), then the
    system's."""
    found: list[str] = []
    spec = importlib.util.find_spec("psycopg_binary")
    if spec is not None and spec.origin is not None:
        package = Path(spec.origin).parent
        for folder in (package.parent / "psycopg_binary.libs", package / ".dylibs"):
            found += sorted(str(p) for p in folder.glob("libpq*"))
    return found + list(_SYSTEM_NAMES.get(sys.platform, ()))


@cache
def _library() -> ctypes.CDLL:
    for name in _candidates():
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        for fname, restype, argtypes in _SIGNATURES:
            function = getattr(lib, fname)
            function.restype = restype
            function.argtypes = argtypes
        return lib
    raise LibpqMissing("no libpq found")


def _text(raw: bytes | None) -> str:
    return (raw or b"").decode("utf-8", "replace").strip()


class Connection:
    """One open libpq connection; every statement runs in a transaction of its own."""

    def __init__(self, lib: ctypes.CDLL, handle: int) -> None:
        self._lib = lib
        self._handle: int | None = handle

    def execute(self, sql: str, params: Sequence[object] = ()) -> list[tuple[str | None, ...]]:
        """The rows of ``sql`` as text (None for NULL), with ``params`` sent as text for its
        ``$1``, ``$2``…, committed when it ends."""
        values = (_s * max(len(params), 1))(*(str(p).encode() for p in params))
        result = self._lib.PQexecParams(
            self._open(), sql.encode(), len(params), None, values, None, None, 0
        )
        try:
            if self._lib.PQresultStatus(result) not in _RESULT_OK:
                raise PgError(self._message(result))
            get, null = self._lib.PQgetvalue, self._lib.PQgetisnull
            fields = range(self._lib.PQnfields(result))
            return [
                tuple(None if null(result, r, f) else get(result, r, f).decode() for f in fields)
                for r in range(self._lib.PQntuples(result))
            ]
        finally:
            self._lib.PQclear(result)  # a NULL result (out of memory) is cleared as nothing

    def settings(self) -> dict[str, str | None]:
        """Every libpq setting of this connection, by keyword (``PQconninfo``)."""
        options = self._lib.PQconninfo(self._open())
        found: dict[str, str | None] = {}
        try:
            each = ctypes.cast(options, ctypes.POINTER(_Option))
            i = 0
            while each[i].keyword is not None:
                raw = each[i].val
                found[each[i].keyword.decode()] = None if raw is None else raw.decode()
                i += 1
        finally:
            self._lib.PQconninfoFree(options)
        return found

    def close(self) -> None:
        if self._handle is not None:
            self._lib.PQfinish(self._handle)
            self._handle = None

    def _open(self) -> int:
        if self._handle is None:
            raise PgError("the connection is closed")
        return self._handle

    def _message(self, result: int | None) -> str:
        """The server's own words for a failed statement (its primary message, as psycopg
        shows it), else libpq's (a lost connection has no server message)."""
        primary = self._lib.PQresultErrorField(result, _PRIMARY) if result else None
        if primary:
            return _text(primary)
        message = _text(self._lib.PQresultErrorMessage(result) if result else None)
        return message or _text(self._lib.PQerrorMessage(self._handle)) or "unknown error"


def connect(settings: Mapping[str, object]) -> Connection:
    """A connection made with ``settings`` (libpq keywords, as psycopg's ``connect`` takes
    them); ``dbname`` is a name, never read as a connection string (psycopg does not either).
    Raises ``LibpqMissing`` or ``PgError``."""
    lib = _library()
    keys = [k.encode() for k in settings] + [None]
    values = [str(v).encode() for v in settings.values()] + [None]
    handle = lib.PQconnectdbParams((_s * len(keys))(*keys), (_s * len(values))(*values), 0)
    if not handle:
        raise PgError("libpq could not allocate a connection")
    if lib.PQstatus(handle) != _CONNECTION_OK:
        message = _text(lib.PQerrorMessage(handle))
        lib.PQfinish(handle)
        raise PgError(message)
    return Connection(lib, handle)


def numbered(sql: str) -> str:
    """``sql`` with psycopg's ``%s`` placeholders written as libpq's ``$1``, ``$2``…, so the
    same statement text serves both (the statements here hold no other ``%``)."""
    parts = sql.split("%s")
    if any("%" in part for part in parts):
        raise ValueError("a statement with a % other than %s placeholders")
    return parts[0] + "".join(f"${n}{part}" for n, part in enumerate(parts[1:], 1))
