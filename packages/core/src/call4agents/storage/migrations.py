"""Numbered schema migrations: position in ``MIGRATIONS`` is the version it brings a ledger to.

All of them run in one transaction that holds the migration lock (``BEGIN IMMEDIATE`` on SQLite,
an advisory transaction lock on PostgreSQL), so workers starting together migrate once, a failed
migration leaves the version as it was, and running them again is a no-op.
A migration is never edited once released: a change to ``tables.py`` comes with a new entry here.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import Connection, Engine, inspect, select, text
from sqlalchemy.exc import OperationalError

from call4agents.model.errors import LedgerError

from . import news, tally
from .dialects import qualified, schema_of
from .tables import (
    approvals,
    audit,
    changes,
    dead_letters,
    effects,
    meta,
    metadata,
    partial_conditions,
    run_counters,
    run_tallies,
    runs,
    schema_version,
    tallies,
)

# Arbitrary constant that names "Call4Agents migrations" among other users of advisory locks.
_PG_LOCK_ID = 0x0C4A_0001


def _v1(conn: Connection) -> None:
    schema_version.create(conn)
    effects.create(conn)  # with its indexes


def _v2(conn: Connection) -> None:
    approvals.create(conn)
    meta.create(conn)
    conn.execute(meta.insert().values(name="key_salt", value=secrets.token_hex(32)))


def _v3(conn: Connection) -> None:
    runs.create(conn)  # run controls: escalation hand-offs and undo outcomes
    run_counters.create(conn)  # budgets that survive a resume


def _v4(conn: Connection) -> None:
    """Repeats had a table of their own here, c4a_dedup_hits, until version 16 (see _v16)."""


# How long adding a column may wait for the table's lock on PostgreSQL. While it waits, every
# statement on the table queues behind it; a transaction left open elsewhere would stall all
# workers, so the migration gives up instead (nothing changed) and the next start tries again.
PG_ALTER_LOCK_TIMEOUT = "10s"


def _v5(conn: Connection) -> None:
    # Argument digests on actions and approval tickets. A ledger made by this version got the
    # columns from _v1 and _v2 (which create the tables as they are defined now); one made by an
    # older version gets them here.
    for name in (effects.name, approvals.name):
        _add_column(conn, name, "args_digest", "VARCHAR(64)")


def _v6(conn: Connection) -> None:
    # The framework's call id a ticket was opened for, so a yes given through the framework for
    # that call (keyed by call id, not arguments) covers only the arguments first shown for it.
    _add_column(conn, approvals.name, "call_id", "TEXT")


def _add_column(conn: Connection, name: str, column: str, sql_type: str) -> None:
    """Add a column unless the table has it (a table made by this version was created whole)."""
    if column in {c["name"] for c in inspect(conn).get_columns(name, schema=schema_of(conn))}:
        return
    table = qualified(conn, name)
    _locking(
        conn,
        name,
        lambda: conn.execute(text(f"ALTER TABLE {table} ADD COLUMN {column} {sql_type}")),
    )


def _locking(conn: Connection, name: str, work: Callable[[], object]) -> None:
    """``work``, which locks table ``name``, giving up after PG_ALTER_LOCK_TIMEOUT (PostgreSQL)."""
    table = qualified(conn, name)
    if conn.dialect.name == "postgresql":
        conn.execute(text(f"SET LOCAL lock_timeout = '{PG_ALTER_LOCK_TIMEOUT}'"))
    try:
        work()
    except OperationalError as exc:
        if getattr(exc.orig, "sqlstate", None) != "55P03":  # lock_not_available
            raise
        raise LedgerError(
            f"could not change {table} within {PG_ALTER_LOCK_TIMEOUT}: another session "
            "holds the table (a transaction left open?). Nothing was changed; end that session, "
            "then open the ledger again or run `call4agents migrate`."
        ) from None


def _v7(conn: Connection) -> None:
    # Approvals waiting now, without reading every ticket ever opened. A ledger made by this
    # version got it from _v2. (The tallies it added, versions 7 to 15 kept in tables that
    # _v16 replaces, counting afresh what a ledger holds.)
    pending = next(i for i in approvals.indexes if i.name == "c4a_approvals_pending")
    pending.create(conn, checkfirst=True)


def _v8(conn: Connection) -> None:
    # Which policy asked for a ticket and the tool's kind (nullable: older tickets have neither),
    # and, on PostgreSQL, a notification when a ticket opens or an action falls in doubt, so the
    # console shows it at once (see _live).
    for column, sql_type in (("asked_by", "TEXT"), ("kind", "VARCHAR(16)")):
        _add_column(conn, approvals.name, column, sql_type)
    if conn.dialect.name == "postgresql":
        _locking(conn, effects.name, lambda: news.create_triggers(conn))


def _v9(conn: Connection) -> None:
    # Runs by a counter's value: completed in a window. A ledger made by this version got it
    # from _v3. (The figures over time it added come with _v16.)
    by_value = next(i for i in run_counters.indexes if i.name == "c4a_run_counters_value")
    by_value.create(conn, checkfirst=True)


def _v10(conn: Connection) -> None:
    """The alerts' run figures were kept in tables of their own here, until version 16."""


def _v11(conn: Connection) -> None:
    # Counter names sort by bytes on PostgreSQL (see tables._ByteName), as SQLite's always did.
    if conn.dialect.name != "postgresql":
        return

    def to_bytes_order() -> None:
        tally.drop_triggers(conn)  # a trigger's WHEN names the column; _v16 makes them afresh
        as_declared = run_counters.c.name.type.compile(dialect=conn.dialect)  # COLLATE "C"
        conn.execute(
            text(
                f"ALTER TABLE {qualified(conn, run_counters.name)} "
                f"ALTER COLUMN name TYPE {as_declared}"
            )
        )

    # The table stays locked until this commits: no counter changes meanwhile.
    _locking(conn, run_counters.name, to_bytes_order)


def _v12(conn: Connection) -> None:
    audit.create(conn, checkfirst=True)  # every decision and settlement, kept
    dead_letters.create(conn, checkfirst=True)  # webhook events given up on, until replayed


def _v13(conn: Connection) -> None:
    # Which masked values a ticket holds, by digest (see c4a_approvals.redacted_marks). Older
    # tickets keep NULL: the inbox says it cannot compare them.
    _add_column(conn, approvals.name, "redacted_marks", "TEXT")


def _v14(conn: Connection) -> None:
    # The audit read by time with one index per filter (see tables.py): version 12's two
    # indexes by id go. A ledger made by this version got the new ones from _v12.
    for old in ("c4a_audit_actor", "c4a_audit_run"):
        conn.execute(text(f"DROP INDEX IF EXISTS {qualified(conn, old)}"))
    for index in audit.indexes:
        index.create(conn, checkfirst=True)


def _v15(conn: Connection) -> None:
    # The in-doubt queue read by keyset, longest in doubt first (see tables.py).
    found = next(i for i in effects.indexes if i.name == "c4a_effects_doubt")
    found.create(conn, checkfirst=True)


# What versions 7 to 15 kept the figures in, beside the tables version 16 makes afresh.
_REPLACED = ("c4a_timeline", "c4a_run_changes", "c4a_run_marks", "c4a_dedup_hits")


def _v16(conn: Connection) -> None:
    # One way of counting (see tally): the change logs of actions and of run counters, the
    # tallies, the timeline, the run tallies and marks, and the repeats' own table become one
    # change log, one table of tallies (all time, by minute and by hour) and one of per-run
    # tallies. The old triggers go first: dropping them locks c4a_effects and c4a_run_counters
    # against writers until this commits (waiting only so long for that, as adding a column
    # does), so no change lands between the log of every row below and the new triggers. The
    # first reader of the figures folds that log, in batches, each its own transaction.
    _locking(conn, effects.name, lambda: tally.drop_triggers(conn))
    repeated: Sequence[Any] = []
    if inspect(conn).has_table("c4a_dedup_hits", schema=schema_of(conn)):  # versions 4 to 15
        old = qualified(conn, "c4a_dedup_hits")
        repeated = conn.execute(text(f"SELECT minute, sum(hits) FROM {old} GROUP BY minute")).all()
    for name in _REPLACED:
        conn.execute(text(f"DROP TABLE IF EXISTS {qualified(conn, name)}"))
    for table in (changes, tallies, run_tallies):
        table.drop(conn, checkfirst=True)
        table.create(conn)
    tally.create_triggers(conn)
    tally.log_everything(conn)
    if repeated:  # by the minute they were counted in, as the fold files them
        conn.execute(
            changes.insert(),
            [
                {"run_id": "", "name": tally.DEDUPED, "new_value": hits, "created_at": minute * 60}
                for minute, hits in repeated
            ],
        )


MIGRATIONS: list[Callable[[Connection], None]] = [
    _v1,
    _v2,
    _v3,
    _v4,
    _v5,
    _v6,
    _v7,
    _v8,
    _v9,
    _v10,
    _v11,
    _v12,
    _v13,
    _v14,
    _v15,
    _v16,
]
# The schema version this code writes and reads: the number of migrations.
CURRENT = len(MIGRATIONS)


def refuse_newer(version: int) -> None:
    if version > CURRENT:
        raise LedgerError(
            f"this ledger was written by a newer Call4Agents (schema version {version}; this "
            f"version knows up to {CURRENT}). Upgrade call4agents on this machine; the ledger was "
            "not changed."
        )


def create_current(conn: Connection) -> None:
    """A brand-new ledger in one pass: every table and index as tables.py declares them, and the
    triggers the migrations leave. It is what MIGRATIONS make from nothing (a test compares the
    two on both databases), in a few dozen statements instead of the hundreds they send to
    create, alter and re-create along the way: a quarter of a second less per new PostgreSQL
    schema."""
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


def migrate(engine: Engine, *, schema: str | None = None, target: int = CURRENT) -> tuple[int, int]:
    """Bring the ledger to ``target``; returns (version before, version after)."""
    if engine.dialect.name == "postgresql":
        # Most opens find the ledger current. They read its version without the lock that every
        # migration on the server takes, so that opening a ledger never queues behind another
        # schema's creation or upgrade; a ledger that needs work is read again under the lock.
        with engine.connect() as conn:
            found = current_version(conn, schema)
        if found >= target:
            refuse_newer(found)
            return found, found
    with engine.begin() as conn:  # BEGIN IMMEDIATE on SQLite: the lock for the whole run
        if engine.dialect.name == "postgresql":
            conn.execute(text("SELECT pg_advisory_xact_lock(:id)"), {"id": _PG_LOCK_ID})
            if schema:
                conn.execute(text(f'CREATE SCHEMA IF NOT EXISTS "{schema}"'))
        before = current_version(conn, schema)
        refuse_newer(before)
        partial_conditions(engine.dialect.name)
        if before == 0 and target == CURRENT:
            create_current(conn)
        else:
            for version in range(before + 1, target + 1):
                MIGRATIONS[version - 1](conn)
        if target > before:
            if before == 0:
                conn.execute(schema_version.insert().values(version=target))
            else:
                conn.execute(schema_version.update().values(version=target))
        return before, max(before, target)


__all__ = ["CURRENT", "MIGRATIONS", "create_current", "current_version", "migrate", "refuse_newer"]
