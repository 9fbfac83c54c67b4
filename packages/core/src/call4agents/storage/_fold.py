"""What the two folds share (``_tally`` for actions, ``_run_tally`` for run counters): the batch
size, table names as the schema in use spells them, names read by prefix, and adding rows to a
tally table."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import ColumnElement, Connection, and_, text

# Rows folded per transaction: a SQLite fold holds the write lock while it runs, so a long
# backlog (a ledger nobody read figures from for a while) goes in short steps.
BATCH = 20_000
# The tables the two folds fill and the logs they empty: what a bulk load clears before it
# seeds the figures afresh (``_tally.seed``, ``_run_tally.seed``).
FOLDED = (
    "c4a_tallies",
    "c4a_run_tallies",
    "c4a_changes",
    "c4a_timeline",
    "c4a_run_changes",
    "c4a_run_marks",
)


def qualified(conn: Connection, name: str) -> str:
    schema = (conn.get_execution_options().get("schema_translate_map") or {}).get(None)
    return f'"{schema}".{name}' if schema else name


def prefixed(name: ColumnElement[str], prefix: str) -> ColumnElement[bool]:
    """The names that start with ``prefix`` (one ending in ":"), as a range of their index: in
    byte order, which such names sort by on both databases (``tables._RangeName``), ";" comes
    right after ":"."""
    return and_(name >= prefix, name < prefix[:-1] + ";")


def upsert(
    conn: Connection, table: Any, rows: list[dict[str, Any]], key: list[str], *, replace: bool
) -> None:
    from .store import dialect_insert

    stmt = dialect_insert(conn.dialect.name)(table)
    columns = [c.name for c in table.columns if c.name not in key]
    new = {c: stmt.excluded[c] if replace else table.c[c] + stmt.excluded[c] for c in columns}
    conn.execute(stmt.on_conflict_do_update(index_elements=key, set_=new), rows)


def create_log_function(
    conn: Connection, function: str, log: str, columns: str, rows: Mapping[str, str]
) -> None:
    """A PostgreSQL trigger function appending a change to ``log``: for each operation
    (``TG_OP``) in ``rows``, the values to insert into ``columns``. The triggers that call it
    are each fold's own."""
    branches = "\n".join(
        f"  {'IF' if i == 0 else 'ELSIF'} TG_OP = '{op}' THEN\n"
        f"    INSERT INTO {log} ({columns}) VALUES ({row});"
        for i, (op, row) in enumerate(rows.items())
    )
    conn.execute(
        text(
            f"CREATE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql AS $$\nBEGIN\n"
            f"{branches}\n  END IF;\n  RETURN NULL;\nEND\n$$"
        )
    )
