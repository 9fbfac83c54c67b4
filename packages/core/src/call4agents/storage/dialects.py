"""What differs between SQLite and PostgreSQL, in one object per database.

Every statement elsewhere in storage is written once and asks its database's object for the few
things that differ: the clock, the insert that can skip a conflict, the row lock, whether an
outcome can wake a waiter, and which faults may pass if tried again.
"""

from __future__ import annotations

from typing import Any, TypeVar

from sqlalchemy import (
    ColumnElement,
    Connection,
    Engine,
    Float,
    Select,
    Table,
    Text,
    any_,
    bindparam,
    literal_column,
    text,
)
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError

S = TypeVar("S", bound=Select[Any])
_CHUNK = 500


class Dialect:
    name: str
    # The database's clock in epoch seconds, as SQL: the one clock every lease is judged by.
    now_text: str
    # An outcome wakes a waiter through the database (PostgreSQL's LISTEN/NOTIFY); elsewhere
    # waiters re-read the row.
    wakes: bool = False
    # Rows can be locked one by one (SELECT ... FOR UPDATE); SQLite locks the whole file.
    row_locks: bool = False

    def now(self) -> ColumnElement[float]:
        """``now_text`` in a statement: written into it, so that it adds no parameters."""
        return literal_column(f"({self.now_text})", Float)

    def insert(self, table: Table) -> Any:
        """An INSERT that can skip a row whose key exists (``.on_conflict_do_nothing``)."""
        raise NotImplementedError

    def locked(self, stmt: S) -> S:
        """``stmt`` reading its rows under a row lock, where the database locks rows; SQLite's
        write transaction (BEGIN IMMEDIATE) already holds the whole file."""
        return stmt

    def transient(self, cause: DBAPIError) -> bool:
        """A fault that may pass if tried again: the connection went away, a lock was busy."""
        raise NotImplementedError

    def hold(self, conn: Connection, lock_id: int) -> None:
        """Hold a named lock until the transaction ends; SQLite's one writer holds them all."""

    def among(self, column: ColumnElement[Any], values: list[str]) -> list[ColumnElement[bool]]:
        """Conditions, one per statement to send, that together pick the rows whose ``column``
        is one of ``values``: lists of at most 500 (under SQLite's limit of bound parameters)."""
        return [column.in_(values[i : i + _CHUNK]) for i in range(0, len(values), _CHUNK)]


class SQLite(Dialect):
    name = "sqlite"
    # julianday('now'): one clock for every process of this machine, at millisecond grain
    now_text = "((julianday('now') - 2440587.5) * 86400.0)"

    def insert(self, table: Table) -> Any:
        # Each dialect's module is imported when its database is used: a SQLite ledger never
        # loads PostgreSQL's (some 35 ms of a command's start-up), nor PostgreSQL's SQLite's.
        from sqlalchemy.dialects import sqlite

        return sqlite.insert(table)

    def transient(self, cause: DBAPIError) -> bool:
        if cause.connection_invalidated:
            return isinstance(cause, (OperationalError, InterfaceError))
        return "locked" in str(cause.orig) or "busy" in str(cause.orig)


class PostgreSQL(Dialect):
    name = "postgresql"
    now_text = "extract(epoch from clock_timestamp())::float8"
    wakes = True
    row_locks = True

    def insert(self, table: Table) -> Any:
        from sqlalchemy.dialects import postgresql

        return postgresql.insert(table)

    def locked(self, stmt: S) -> S:
        return stmt.with_for_update()

    def among(self, column: ColumnElement[Any], values: list[str]) -> list[ColumnElement[bool]]:
        # One array parameter: one statement, whose text psycopg converts once and caches,
        # where lists of bound parameters would each be a new, long statement.
        if not values:
            return []
        from sqlalchemy.dialects import postgresql

        return [column == any_(bindparam("among", values, type_=postgresql.ARRAY(Text)))]

    def hold(self, conn: Connection, lock_id: int) -> None:
        conn.execute(text("SELECT pg_advisory_xact_lock(:id)"), {"id": lock_id})

    def transient(self, cause: DBAPIError) -> bool:
        return isinstance(cause, (OperationalError, InterfaceError))


DIALECTS: dict[str, Dialect] = {d.name: d for d in (SQLite(), PostgreSQL())}


def schema_of(conn: Connection | Engine) -> str | None:
    """The ledger's PostgreSQL schema, as ``conn`` or an engine translates table names into it."""
    found = (conn.get_execution_options().get("schema_translate_map") or {}).get(None)
    return str(found) if found else None


def qualified(conn: Connection, name: str) -> str:
    """A table or function as statements written as text name it: in the ledger's schema."""
    schema = schema_of(conn)
    return f'"{schema}".{name}' if schema else name


def dialect_of(name: str) -> Dialect:
    """The object of a database by SQLAlchemy's dialect name (``engine.dialect.name``)."""
    return DIALECTS[name]
