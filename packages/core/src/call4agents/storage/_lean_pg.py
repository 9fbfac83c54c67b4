"""``call4agents doubt`` on a PostgreSQL ledger with libpq alone: the lean route's second half.

What ``_lean`` does for SQLite, on PostgreSQL: the same four statements, hand-written and held to
their SQLAlchemy twins by ``tests/postgres/test_lean_doubt_pg.py``, on one libpq connection
(``_libpq``, no psycopg import) set up as the engine's are (``_pgconn``: the libpq settings,
JIT off):

- the schema version and the key salt, as ``Ledger`` reads them on opening;
- the started actions, with whether each lease lapsed by the database clock (``reads.started``);
- an action moved to in doubt (``Store.mark_in_doubt``), waking whoever waits for it;
- the actions in doubt, oldest first (``reads.in_doubt``).

With a ``schema=`` the statements name that schema's tables, as the engine's schema translation
does. The URL is read here with ``urllib.parse``, for the plain form only
(``postgresql[+psycopg]://user:password@host:port/database?setting=value``), and must give libpq
exactly what SQLAlchemy's URL would. Anything else (another form, no libpq to load, no server, no
tables, another schema version, a client encoding other than UTF-8, any fault while opening)
returns None and the caller takes the full route, which gives the answer or the error it always
gave, with one exception: a server that did not answer within the connect timeout is reported
here, in the full route's words, rather than waited for a second time. After opening, a fault is
the one-line ``LedgerError`` the store raises for it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import parse_qsl, unquote

from call4agents.model.errors import LedgerError

from . import _libpq, _pgconn, _sqlite
from ._basics import CURRENT, LeanConnection, cannot_open, database_failed
from ._lean import COLUMNS

_SCHEMES = ("postgresql://", "postgresql+psycopg://")
# A host and port as the plain form writes them: one name or IPv4 address, no brackets (IPv6),
# no list of hosts, no escapes. Empty: libpq's default, or a socket named in ?host=.
_HOST = re.compile(r"[A-Za-z0-9._~-]*")
_PORT = re.compile(r"[0-9]{1,5}")
_QUERY_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NOW = _pgconn.NOW
# The open-actions index's own condition, as ``tables.open_states`` writes it.
_OPEN = "state IN ('started', 'in_doubt')"
# How the command line opens a ledger (``Ledger``'s default): commits survive power loss.
_DURABILITY: _sqlite.Durability = "power"


def connect_kwargs(url: str) -> dict[str, Any] | None:
    """psycopg's keyword arguments for a PostgreSQL ledger URL: what SQLAlchemy's URL and its
    psycopg dialect give it (user, password, host, port, dbname, then the query's settings), for
    the plain form only; None for anything else, including any URL that may not split as the full
    route splits it (an unencoded @, / or ? in a password)."""
    scheme = next((s for s in _SCHEMES if url.startswith(s)), None)
    if scheme is None:
        return None
    rest, _, query = url[len(scheme) :].partition("?")
    authority, slash, database = rest.partition("/")
    if not slash or not database or authority.count("@") > 1:
        return None
    userinfo, at, hostport = authority.rpartition("@")
    user, _, password = userinfo.partition(":")
    host, colon, port = hostport.partition(":")
    if not _HOST.fullmatch(host) or (colon and not _PORT.fullmatch(port)):
        return None
    found: dict[str, Any] = {}
    if at and user:
        found["user"] = unquote(user)
    if at and password:
        found["password"] = unquote(password)
    if host:
        found["host"] = host
    if port:
        found["port"] = int(port)
    if "%" in database:
        # SQLAlchemy 2.1 decodes a database name's escapes and 2.0 keeps them (Python 3.10
        # installs 2.0): the full route reads it as the installed one does.
        return None
    if "@" in database:
        return None  # the full route refuses it (a password cut apart)
    found["dbname"] = database
    settings = parse_qsl(query)
    keys = [k for k, _ in settings]
    if len(set(keys)) != len(keys) or not all(_QUERY_KEY.fullmatch(k) for k in keys):
        return None
    given = dict(settings)
    return {**found, **given, **_pgconn.connect_args(given, _DURABILITY)}


def table(name: str, schema: str | None) -> str:
    """A ledger table's name in statements: in ``schema`` if one is given (quoted, as the
    engine's schema translation quotes it where it must; quoting a plain lowercase name changes
    nothing)."""
    return f'"{schema}".{name}' if schema else name


def version_sql(schema: str | None) -> str:
    return f"SELECT version FROM {table('c4a_schema', schema)}"


def salt_sql(schema: str | None) -> str:
    return f"SELECT value FROM {table('c4a_meta', schema)} WHERE name = 'key_salt'"


def started_sql(schema: str | None) -> str:
    return (
        f"SELECT key, attempt, owner, lease_expires_at <= {_NOW} "
        f"FROM {table('c4a_effects', schema)} WHERE {_OPEN} AND state = 'started'"
    )


def in_doubt_sql(schema: str | None) -> str:
    return (
        f"SELECT {', '.join(COLUMNS)} FROM {table('c4a_effects', schema)} "
        f"WHERE {_OPEN} AND state = 'in_doubt' ORDER BY seq"
    )


def mark_sql(schema: str | None, *, only_if_expired: bool, owner: bool) -> str:
    """``Store.mark_in_doubt``'s UPDATE and its wake-up in one statement (the wake-up runs only
    for the row moved): parameters note, key, attempt, the owner if judged, then the lock id
    and the channel of the wake-up."""
    sql = (
        f"UPDATE {table('c4a_effects', schema)} SET state = 'in_doubt', note = %s, owner = NULL, "
        f"updated_at = {_NOW} WHERE key = %s AND attempt = %s AND state = 'started'"
    )
    sql += " AND owner = %s" if owner else ""
    sql += f" AND lease_expires_at <= {_NOW}" if only_if_expired else ""
    return f"{sql} RETURNING {_pgconn.wake_sql('key')}"


# How a value read as text becomes what psycopg would have given, by column; text otherwise.
_DECODE: dict[str, Callable[[str], Any]] = {
    "seq": int,
    "attempt": int,
    "lease_expires_at": float,  # float8 text round-trips exactly (extra_float_digits >= 1)
    "created_at": float,
    "updated_at": float,
    "pruned_at": float,
    "lapsed": lambda text: text == "t",
}
_STARTED = ("key", "attempt", "owner", "lapsed")


def _decoded(names: Sequence[str], row: Sequence[str | None]) -> tuple[Any, ...]:
    return tuple(
        None if value is None else _DECODE.get(name, str)(value)
        for name, value in zip(names, row, strict=True)
    )


class LeanPgLedger(LeanConnection):
    """A PostgreSQL ledger opened with libpq alone, for the statements ``doubt`` needs."""

    _conn: _libpq.Connection

    def __init__(self, conn: _libpq.Connection, schema: str | None) -> None:
        self._conn = conn
        self._schema = schema

    def _rows(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[str | None, ...]]:
        """The rows of one statement, in a transaction of its own, committed."""
        try:
            return self._conn.execute(_libpq.numbered(sql), params)
        except _libpq.PgError as exc:
            raise database_failed(exc) from exc

    def started(self) -> list[tuple[str, int, str | None, Any]]:
        """Every started action: key, attempt, owner, and whether its lease lapsed."""
        rows = self._rows(started_sql(self._schema))
        return [_decoded(_STARTED, row) for row in rows]

    def mark_in_doubt(
        self,
        key: str,
        attempt: int,
        note: str,
        *,
        only_if_expired: bool,
        owner: str | None = None,
    ) -> bool:
        """Move a started attempt to in doubt, as ``Store.mark_in_doubt`` does, waking whoever
        waits for it once the move commits."""
        sql = mark_sql(self._schema, only_if_expired=only_if_expired, owner=owner is not None)
        judged = () if owner is None else (owner,)
        wake = (_pgconn.lock_id(self._schema, key), _pgconn.channel_for(self._schema))
        return len(self._rows(sql, (note, key, attempt, *judged, *wake))) == 1

    def in_doubt(self) -> list[dict[str, Any]]:
        """The actions in doubt, in the order they were first attempted, as column mappings."""
        rows = self._rows(in_doubt_sql(self._schema))
        return [dict(zip(COLUMNS, _decoded(COLUMNS, row), strict=True)) for row in rows]


def _opened(conn: _libpq.Connection, schema: str | None) -> bool:
    """Whether this route can serve the ledger on ``conn``: set up as the engine's sessions
    are, texts in UTF-8, and tables of this code's schema version, holding a salt."""
    conn.execute("SET jit = off")  # as _pgconn.no_jit does on the engine's connections
    if conn.execute("SHOW client_encoding") != [("UTF8",)]:
        return False
    found = conn.execute(version_sql(schema))
    if not found or found[0][0] != str(CURRENT):
        return False
    conn.execute(salt_sql(schema))
    return True


def _unanswered(url: str | None, exc: _libpq.PgError) -> LedgerError:
    """What ``Ledger`` says when it cannot connect, for a server that never answered: the full
    route would wait out the same timeout again only to say so."""
    return cannot_open(re.sub(r"(//[^/@]*?:)[^/]*@", r"\1***@", _sqlite.given_url(url)), exc)


def open_ledger(url: str | None, schema: str | None) -> LeanPgLedger | None:
    """The PostgreSQL ledger at ``url`` (else ``$CALL4AGENTS_URL``; in ``schema``), opened as
    ``Ledger(url, schema=schema, auto_migrate=False)`` opens it, if this route can serve it;
    None when the full route must (see the module's docstring)."""
    kwargs = connect_kwargs(_sqlite.given_url(url))
    if kwargs is None or (schema is not None and not _pgconn.SCHEMA_NAME.fullmatch(schema)):
        return None
    try:
        conn = _libpq.connect(kwargs)
    except _libpq.PgError as exc:
        if "timeout expired" in str(exc):
            raise _unanswered(url, exc) from exc
        return None
    except Exception:  # noqa: BLE001 - whatever it is, the full route meets it and words it
        return None
    try:
        served = _opened(conn, schema)
    except Exception:  # noqa: BLE001 - as above
        served = False
    if served:
        return LeanPgLedger(conn, schema)
    conn.close()
    return None
