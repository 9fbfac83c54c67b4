"""``call4agents doubt`` on an SQLite ledger with ``sqlite3`` alone: the lean route.

A cron job or a CI step runs ``doubt`` in a new process, where importing SQLAlchemy, building the
engine and compiling its statements cost several times what the command itself does. On an
SQLite ledger the command needs four plain statements, so it takes them here, hand-written like
the hot lane's (``_hot.py``) and held to their SQLAlchemy twins by
``tests/core/test_lean_doubt.py``:

- the schema version, read under ``BEGIN IMMEDIATE`` as the ledger's engine reads it, and the
  key salt, as ``Ledger`` reads them on opening;
- the started actions, with whether each lease lapsed by the database clock (``reads.started``);
- an action moved to in doubt (``Store.mark_in_doubt``), in its own ``BEGIN IMMEDIATE``;
- the actions in doubt, oldest first (``reads.in_doubt``).

The file is checked and the connection set up by ``_sqlite``, as the engine does. Anything else
is not this route's to judge: a URL of another form, no file there, a file that fails a check,
a schema of another version, any fault while opening. ``open_ledger`` then returns None and the
caller takes the full route, which gives the answer (or the error) it always gave. After opening,
a fault is the one-line ``LedgerError`` the store raises for it.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any

from call4agents.model.errors import LedgerError

from . import _files, _sqlite
from ._basics import CURRENT, LeanConnection, database_failed

# Every column of c4a_effects: what ``select(effects)`` reads, by name.
COLUMNS = (
    "seq",
    "key",
    "run_id",
    "tool",
    "kind",
    "state",
    "attempt",
    "owner",
    "lease_expires_at",
    "args",
    "result",
    "error",
    "note",
    "resolved_by",
    "evidence",
    "created_at",
    "updated_at",
    "pruned_at",
    "args_digest",
)
_NOW = _sqlite.NOW
# The open-actions index's own condition, with its literal values, so SQLite uses it
# (``tables.open_states``).
_OPEN = "state IN ('started', 'in_doubt')"

VERSION_SQL = "SELECT version FROM c4a_schema"
SALT_SQL = "SELECT value FROM c4a_meta WHERE name = 'key_salt'"
STARTED_SQL = (
    f"SELECT key, attempt, owner, lease_expires_at <= {_NOW} FROM c4a_effects "
    f"WHERE {_OPEN} AND state = 'started'"
)
IN_DOUBT_SQL = (
    f"SELECT {', '.join(COLUMNS)} FROM c4a_effects WHERE {_OPEN} AND state = 'in_doubt' "
    "ORDER BY seq"
)
_MARK_SQL = (
    f"UPDATE c4a_effects SET state = 'in_doubt', note = ?, owner = NULL, updated_at = {_NOW} "
    "WHERE key = ? AND attempt = ? AND state = 'started'"
)
_SCHEMES = ("sqlite:///", "sqlite+pysqlite:///")
# How the command line opens a ledger (``Ledger``'s defaults): commits survive power loss.
_DURABILITY: _sqlite.Durability = "power"


def sqlite_path(url: str | None) -> Path | None:
    """The SQLite file a ledger URL names (as ``_db.parse_url`` reads it), for the plain forms
    only: ``sqlite:///path`` or a bare path, with no query and no percent-escapes. None for
    anything else."""
    raw = _sqlite.given_url(url)
    database = next((raw[len(s) :] for s in _SCHEMES if raw.startswith(s)), None)
    if not database or database == ":memory:" or "?" in database or "%" in database:
        return None
    return Path(database).expanduser()


def mark_sql(*, only_if_expired: bool, owner: bool) -> str:
    """``Store.mark_in_doubt``'s UPDATE: parameters note, key, attempt, then the owner if
    judged; the lease checked against the database clock if it must have lapsed."""
    sql = _MARK_SQL + (" AND owner = ?" if owner else "")
    return sql + (f" AND lease_expires_at <= {_NOW}" if only_if_expired else "")


def _connect(path: Path) -> sqlite3.Connection:
    conn: sqlite3.Connection = sqlite3.connect(path, **_sqlite.connect_args(_sqlite.BUSY_TIMEOUT))
    return conn


def _rollback(conn: sqlite3.Connection) -> None:
    # Some faults (a full disk, an I/O error) have rolled the transaction back already.
    if conn.in_transaction:
        conn.execute("ROLLBACK")


class LeanLedger(LeanConnection):
    """An SQLite ledger opened with ``sqlite3`` alone, for the statements ``doubt`` needs."""

    _conn: sqlite3.Connection

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def started(self) -> list[tuple[str, int, str | None, Any]]:
        """Every started action: key, attempt, owner, and whether its lease lapsed."""
        try:
            found: list[Any] = self._conn.execute(STARTED_SQL).fetchall()
        except sqlite3.Error as exc:
            raise database_failed(exc) from exc
        return found

    def mark_in_doubt(
        self,
        key: str,
        attempt: int,
        note: str,
        *,
        only_if_expired: bool,
        owner: str | None = None,
    ) -> bool:
        """Move a started attempt to in doubt, as ``Store.mark_in_doubt`` does (on SQLite it
        wakes nobody: waiters re-read the row)."""
        sql = mark_sql(only_if_expired=only_if_expired, owner=owner is not None)
        params = (note, key, attempt) if owner is None else (note, key, attempt, owner)
        conn = self._conn
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                done = conn.execute(sql, params).rowcount == 1
            except BaseException:
                _rollback(conn)
                raise
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            raise database_failed(exc) from exc
        return done

    def in_doubt(self) -> list[dict[str, Any]]:
        """The actions in doubt, in the order they were first attempted, as column mappings."""
        try:
            rows = self._conn.execute(IN_DOUBT_SQL).fetchall()
        except sqlite3.Error as exc:
            raise database_failed(exc) from exc
        return [dict(zip(COLUMNS, row, strict=True)) for row in rows]


def open_ledger(url: str | None) -> LeanLedger | None:
    """The SQLite ledger at ``url``, opened as ``Ledger(url, auto_migrate=False)`` opens it,
    if this route can serve it; None when the full route must (see the module's docstring)."""
    path = sqlite_path(url)
    if path is None or not path.exists():
        return None
    try:
        allow = os.environ.get("CALL4AGENTS_ALLOW_NETWORK_FS") == "1"
        _sqlite.check_local_fs(path.parent, allow_network_fs=allow)
        _files.check_ledger_files(path)
    except LedgerError:
        return None
    try:
        conn = _connect(path)
    except sqlite3.Error:
        return None
    try:
        _sqlite.configure(conn, durability=_DURABILITY, busy_timeout=_sqlite.BUSY_TIMEOUT)
        # Read as the engine reads it: a connection's first transaction takes the write lock.
        conn.execute("BEGIN IMMEDIATE")
        try:
            found = conn.execute(VERSION_SQL).fetchone()
        finally:
            _rollback(conn)
        if found is None or found[0] != CURRENT:
            conn.close()
            return None
        conn.execute(SALT_SQL).fetchone()
    except sqlite3.Error:
        conn.close()
        return None
    return LeanLedger(conn)
