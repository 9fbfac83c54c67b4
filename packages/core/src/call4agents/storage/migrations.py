"""The schema's version: a new ledger is made whole, a ledger at an older version is migrated.

Version 16 is the baseline: the schema as ``tables.py`` declares it, with the key salt and the
triggers (``create_current``). Versions 1 to 15 were development builds before the first
release; a ledger at one of them is refused, not upgraded. A change to ``tables.py`` comes with
an entry appended to ``MIGRATIONS`` (version 17 is the first), and a released entry is never
edited. A migration that alters a busy table on PostgreSQL bounds its wait for the table's lock
(``SET LOCAL lock_timeout``): every statement on the table queues behind the waiting change.

The migrations an open needs run in one transaction that holds the migration lock (``BEGIN
IMMEDIATE`` on SQLite, an advisory transaction lock on PostgreSQL), so workers starting together
migrate once, a failed migration leaves the version as it was, and running them again is a no-op.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable

from sqlalchemy import Connection, Engine, inspect, select, text

from call4agents.model.errors import LedgerError

from . import news, tally
from .tables import meta, metadata, partial_conditions, schema_version

# Arbitrary constant that names "Call4Agents migrations" among other users of advisory locks.
_PG_LOCK_ID = 0x0C4A_0001

# The oldest version this code opens: the schema of the first release.
BASELINE = 16
# MIGRATIONS[i] brings a ledger from version BASELINE + i to BASELINE + i + 1.
MIGRATIONS: list[Callable[[Connection], None]] = []
# The schema version this code writes and reads.
CURRENT = BASELINE + len(MIGRATIONS)


def refuse_unknown(version: int) -> None:
    """Raise LedgerError for a ledger this code can neither read nor migrate (0: none yet)."""
    if version > CURRENT:
        raise LedgerError(
            f"this ledger was written by a newer Call4Agents (schema version {version}; this "
            f"version knows up to {CURRENT}). Upgrade call4agents on this machine; the ledger was "
            "not changed."
        )
    if 0 < version < BASELINE:
        raise LedgerError(
            f"this ledger is at schema version {version}, written by a development build of "
            f"Call4Agents before its first release; this version opens ledgers from version "
            f"{BASELINE} on and cannot upgrade it. The ledger was not changed. Export the runs "
            "you need with the build that wrote it (`call4agents export RUN`), then use a new "
            "ledger (another file or schema), made at its first open."
        )


def create_current(conn: Connection) -> None:
    """A brand-new ledger: every table and index as tables.py declares them, the key salt, the
    tallies' triggers and, on PostgreSQL, the news triggers."""
    metadata.create_all(conn, checkfirst=False)
    conn.execute(meta.insert().values(name="key_salt", value=secrets.token_hex(32)))
    tally.create_triggers(conn)
    if conn.dialect.name == "postgresql":
        news.create_triggers(conn)


def current_version(conn: Connection, schema: str | None = None) -> int:
    if not inspect(conn).has_table(schema_version.name, schema=schema):
        return 0
    found = conn.execute(select(schema_version.c.version)).scalar()
    return int(found or 0)


def migrate(engine: Engine, *, schema: str | None = None) -> tuple[int, int]:
    """Bring the ledger to ``CURRENT`` (making it if there is none); returns (version before,
    version after)."""
    if engine.dialect.name == "postgresql":
        # Most opens find the ledger current. They read its version without the lock that every
        # migration on the server takes, so that opening a ledger never queues behind another
        # schema's creation or upgrade; a ledger that needs work is read again under the lock.
        with engine.connect() as conn:
            found = current_version(conn, schema)
        refuse_unknown(found)
        if found == CURRENT:
            return found, found
    with engine.begin() as conn:  # BEGIN IMMEDIATE on SQLite: the lock for the whole run
        if engine.dialect.name == "postgresql":
            conn.execute(text("SELECT pg_advisory_xact_lock(:id)"), {"id": _PG_LOCK_ID})
            if schema:
                conn.execute(text(f'CREATE SCHEMA IF NOT EXISTS "{schema}"'))
        before = current_version(conn, schema)
        refuse_unknown(before)
        partial_conditions(engine.dialect.name)
        if before == 0:
            create_current(conn)
            conn.execute(schema_version.insert().values(version=CURRENT))
        elif before < CURRENT:
            for migration in MIGRATIONS[before - BASELINE :]:
                migration(conn)
            conn.execute(schema_version.update().values(version=CURRENT))
        return before, CURRENT


__all__ = [
    "BASELINE",
    "CURRENT",
    "MIGRATIONS",
    "create_current",
    "current_version",
    "migrate",
    "refuse_unknown",
]
