"""PostgreSQL ledger schemas for the tests, made once per test worker and emptied between tests.

Making a ledger's schema (a dozen tables with their indexes, triggers and functions, then a
commit the server writes to disk) costs about a quarter of a second of the server's time, and
dropping it another tenth; hundreds of tests each made and dropped one. Emptying a schema
instead takes a few milliseconds, so a schema a test is done with is kept for the next test on
the same worker, as long as it is still exactly what a new ledger is:

- its tables, columns, indexes, constraints, triggers and functions are those of a schema the
  ledger made from nothing on this worker (compared with the schema's own name masked, since
  the triggers name their schema), and it is at the current version;
- no other session holds a lock in it (a worker process or thread left running);
- the planner would see nothing of the test before: no statistics gathered (by ANALYZE or
  autovacuum), no table grown past a few pages;
- its rows are deleted, its sequences restart at 1 and its key salt is drawn again, so it holds
  what a new ledger holds.

Anything else (a test that dropped a column, wrote another version, left a session inside) has
the schema dropped, as before. A test that names its schema before opening a ledger gets one
that does not exist yet, so what it opens or migrates is made from nothing (see Target).
"""

from __future__ import annotations

import os
import secrets
import uuid
from typing import Any

import psycopg
from psycopg import sql

# Every line of a schema's shape, with the schema's own name masked: relations, columns (in
# order, with type, nullability, default and collation), indexes, constraints, triggers (and
# whether enabled) and functions (their source). The schema's objects are found through
# pg_depend, by index: pg_class has none on the namespace, and a server whose tests made and
# dropped thousands of schemas has a catalog slow to scan.
_SHAPE = """
WITH owned AS MATERIALIZED (
    SELECT d.classid, d.objid FROM pg_depend d
     WHERE d.refclassid = 'pg_namespace'::regclass
       AND d.refobjid = (SELECT oid FROM pg_namespace WHERE nspname = %(s)s)
),
rels AS MATERIALIZED (
    SELECT c.oid, c.relname, c.relkind, c.relpersistence, c.relrowsecurity, c.reltuples
      FROM pg_class c WHERE c.oid IN (SELECT objid FROM owned WHERE classid = 'pg_class'::regclass)
),
tables AS MATERIALIZED (SELECT oid, relname, reltuples FROM rels WHERE relkind = 'r'),
lines AS (
    SELECT 'relation ' || relname || ' ' || relkind::text || relpersistence::text
           || relrowsecurity::text AS line
      FROM rels
    UNION ALL
    SELECT 'column ' || t.relname || ' '
           || row_number() OVER (PARTITION BY a.attrelid ORDER BY a.attnum) || ' '
           || a.attname || ' '
           || format_type(a.atttypid, a.atttypmod) || ' ' || a.attnotnull::text || ' '
           || coalesce(pg_get_expr(d.adbin, d.adrelid), '') || ' ' || a.attcollation::text
      FROM tables t
      JOIN pg_attribute a ON a.attrelid = t.oid
      LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
     WHERE a.attnum > 0 AND NOT a.attisdropped
    UNION ALL
    SELECT 'index ' || pg_get_indexdef(i.indexrelid)
      FROM tables t JOIN pg_index i ON i.indrelid = t.oid
    UNION ALL
    SELECT 'constraint ' || conname || ' ' || pg_get_constraintdef(k.oid)
      FROM tables t JOIN pg_constraint k ON k.conrelid = t.oid
    UNION ALL
    SELECT 'trigger ' || g.tgenabled::text || ' ' || pg_get_triggerdef(g.oid)
      FROM tables t JOIN pg_trigger g ON g.tgrelid = t.oid
     WHERE NOT g.tgisinternal
    UNION ALL
    SELECT 'function ' || proname || ' ' || prosrc
      FROM pg_proc WHERE oid IN (SELECT objid FROM owned WHERE classid = 'pg_proc'::regclass)
)
SELECT
    (SELECT md5(string_agg(replace(line, %(s)s, '<schema>'), E'\n' ORDER BY line)) FROM lines),
    (SELECT count(*) FROM pg_locks l
      WHERE l.relation IN (SELECT oid FROM rels) AND l.pid <> pg_backend_pid()),
    -- what the planner would read from an earlier test: statistics, or tables grown past a
    -- few pages (it estimates a table never analyzed from its size on disk)
    (SELECT count(*) FROM tables t
      WHERE t.reltuples >= 0
         OR pg_relation_size(t.oid) > %(pages)s * current_setting('block_size')::int
         OR EXISTS (SELECT FROM pg_statistic st WHERE st.starelid = t.oid)),
    -- the tables, those whose triggers write to others first, so that those end empty too
    (SELECT array_agg(t.relname::text ORDER BY EXISTS (
                SELECT FROM pg_trigger g WHERE g.tgrelid = t.oid AND NOT g.tgisinternal
            ) DESC, t.relname)
       FROM tables t)
"""

# Kept by the emptying: the version row, and the key salt (drawn again).
_VERSION, _META = "c4a_schema", "c4a_meta"
# A table of more pages than this had more than a few dozen rows: its emptied pages would make
# the planner judge it as bigger than a new one (tests of plans fill tens of thousands).
_PAGES = 4


def application_name() -> str:
    """This worker's admin connection's, as pg_stat_activity shows it."""
    return f"c4a-test-schemas-{os.getpid()}"


def new_name() -> str:
    return "c4a_t_" + uuid.uuid4().hex[:12]


class SchemaPool:
    """The emptied schemas of one server on this worker, and the shape a new one has."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._plain = url.replace("postgresql+psycopg://", "postgresql://", 1)
        self._free: list[str] = []
        self._shape: str | None = None
        self._conn: psycopg.Connection[Any] | None = None

    def take(self) -> str:
        """A schema holding a new, empty ledger at the current version."""
        if self._shape is None:
            self._shape = self._make_reference()
        return self._free.pop() if self._free else self._make()

    def give_back(self, schema: str) -> None:
        """Keep ``schema`` for the next test if it empties into a new ledger, else drop it."""
        if self._shape is not None and self._run(self._empty, schema):
            self._free.append(schema)
        else:
            self.drop(schema)

    def drop(self, schema: str) -> None:
        self._run(lambda conn, s: conn.execute(f'DROP SCHEMA IF EXISTS "{s}" CASCADE'), schema)

    def close(self) -> None:
        """Drop the schemas kept (at the end of the worker's session)."""
        while self._free:
            self.drop(self._free.pop())
        if self._conn is not None:
            self._conn.close()

    def _make(self) -> str:
        import call4agents as c4a  # the ledger makes its schema, as it does for a user

        schema = new_name()
        c4a.Ledger(self.url, schema=schema).close()
        return schema

    def _make_reference(self) -> str:
        schema = self._make()
        shape = self._run(
            lambda conn, s: conn.execute(_SHAPE, {"s": s, "pages": _PAGES}).fetchone()[0], schema
        )
        self._free.append(schema)
        return str(shape)

    def _empty(self, conn: psycopg.Connection[Any], schema: str) -> bool:
        from call4agents.storage.migrations import CURRENT

        row = conn.execute(_SHAPE, {"s": schema, "pages": _PAGES}).fetchone()
        if row is None or row[0] != self._shape or row[1] or row[2]:
            return False
        name = sql.Identifier(schema)
        versions = conn.execute(
            sql.SQL("SELECT version FROM {}.{}").format(name, sql.Identifier(_VERSION))
        ).fetchall()
        if versions != [(CURRENT,)]:
            return False
        statements = [
            sql.SQL("DELETE FROM {}.{}").format(name, sql.Identifier(table))
            for table in row[3]
            if table not in (_VERSION, _META)
        ]
        meta = sql.SQL("{}.{}").format(name, sql.Identifier(_META))
        statements += [
            sql.SQL("DELETE FROM {} WHERE name <> 'key_salt'").format(meta),
            sql.SQL("UPDATE {} SET value = {} WHERE name = 'key_salt'").format(
                meta, sql.Literal(secrets.token_hex(32))
            ),
            sql.SQL(
                "SELECT setval(c.oid, 1, false) FROM pg_class c"
                " WHERE c.relnamespace = {}::regnamespace AND c.relkind = 'S'"
            ).format(sql.Literal(schema)),
        ]
        # One string of statements: one round trip, run as one transaction.
        conn.execute(sql.SQL("; ").join(statements))
        return True

    def _run(self, work: Any, schema: str) -> Any:
        """``work(conn, schema)`` on this worker's admin connection, made again if the server
        dropped it (a serial test restarts the server)."""
        for attempt in (1, 2):
            if self._conn is None or self._conn.closed:
                self._conn = psycopg.connect(
                    self._plain, autocommit=True, application_name=application_name()
                )
            try:
                return work(self._conn, schema)
            except psycopg.OperationalError:
                if not self._conn.broken or attempt == 2:
                    raise
                self._conn.close()
        raise AssertionError("unreachable")


_POOLS: dict[str, SchemaPool] = {}


def pool_for(url: str) -> SchemaPool:
    if url not in _POOLS:
        _POOLS[url] = SchemaPool(url)
    return _POOLS[url]


def close_all() -> None:
    while _POOLS:
        _POOLS.popitem()[1].close()
