"""Numbered schema migrations: position in ``MIGRATIONS`` is the version it brings a ledger to.

All of them run in one transaction that holds the migration lock (``BEGIN IMMEDIATE`` on SQLite,
an advisory transaction lock on PostgreSQL), so workers starting together migrate once, a failed
migration leaves the version as it was, and running them again is a no-op.
A migration is never edited once released: a change to ``tables.py`` comes with a new entry here.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable

from sqlalchemy import Connection, Engine, delete, inspect, select, text
from sqlalchemy.exc import OperationalError

from call4agents.model.errors import LedgerError

from . import _fold, _live, _run_tally, _tally
from .tables import (
    approvals,
    audit,
    changes,
    dead_letters,
    dedup_hits,
    effects,
    meta,
    metadata,
    run_changes,
    run_counters,
    run_marks,
    run_tallies,
    runs,
    schema_version,
    tallies,
    timeline,
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
    dedup_hits.create(conn)  # how often a repeat was served from the record


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
    schema = (conn.get_execution_options().get("schema_translate_map") or {}).get(None)
    if column in {c["name"] for c in inspect(conn).get_columns(name, schema=schema)}:
        return
    table = f'"{schema}".{name}' if schema else name
    _locking(
        conn,
        name,
        lambda: conn.execute(text(f"ALTER TABLE {table} ADD COLUMN {column} {sql_type}")),
    )


def _triggers_afresh(conn: Connection) -> None:
    _tally.drop_triggers(conn)
    _tally.create_triggers(conn)


def _locking(conn: Connection, name: str, work: Callable[[], object]) -> None:
    """``work``, which locks table ``name``, giving up after PG_ALTER_LOCK_TIMEOUT (PostgreSQL)."""
    schema = (conn.get_execution_options().get("schema_translate_map") or {}).get(None)
    table = f'"{schema}".{name}' if schema else name
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
    # Figures kept up to date as actions change (see _tally): the change log, its triggers, and
    # tallies seeded from the actions already there (one full read, once). Made afresh if a
    # ledger set back to an older version has them already.
    for table in (changes, tallies, run_tallies):
        table.drop(conn, checkfirst=True)
        table.create(conn)
    # The trigger locks c4a_effects against writes until this commits, so the seed below counts
    # a table no worker changes meanwhile; like adding a column, it waits only so long for that.
    _locking(conn, effects.name, lambda: _triggers_afresh(conn))
    _tally.seed(conn, with_timeline=False)  # the timeline comes with _v9
    # Approvals waiting now, without reading every ticket ever opened. A ledger made by this
    # version got it from _v2.
    pending = next(i for i in approvals.indexes if i.name == "c4a_approvals_pending")
    pending.create(conn, checkfirst=True)


def _v8(conn: Connection) -> None:
    # Which policy asked for a ticket and the tool's kind (nullable: older tickets have neither),
    # an index on the minute of repeats, and, on PostgreSQL, a notification when a ticket opens
    # or an action falls in doubt, so the console shows it at once (see _live).
    for column, sql_type in (("asked_by", "TEXT"), ("kind", "VARCHAR(16)")):
        _add_column(conn, approvals.name, column, sql_type)
    if conn.dialect.name == "postgresql":
        _locking(conn, effects.name, lambda: _live.create_triggers(conn))
    # The repeats of a time window, for charts over time. A ledger made by this version got it
    # from _v4.
    minute = next(i for i in dedup_hits.indexes if i.name == "c4a_dedup_hits_minute")
    minute.create(conn, checkfirst=True)


def _v9(conn: Connection) -> None:
    # Figures over time (see _tally): the change log gains the times of each change, the run
    # tallies the time of a run's latest action, and the timeline table is new; all of them are
    # made afresh and seeded from the actions (one full read, once), as _v7 did. The old
    # triggers go first: dropping them locks c4a_effects against writers until this commits,
    # so no change lands between the seed and the new triggers.
    _locking(conn, effects.name, lambda: _tally.drop_triggers(conn))
    for table in (changes, tallies, run_tallies, timeline):
        table.drop(conn, checkfirst=True)
        table.create(conn)
    _tally.create_triggers(conn)
    _tally.seed(conn)
    # Runs by a counter's value: completed in a window, quantiles of cost. A ledger made by
    # this version got it from _v3.
    by_value = next(i for i in run_counters.indexes if i.name == "c4a_run_counters_value")
    by_value.create(conn, checkfirst=True)


def _v10(conn: Connection) -> None:
    # The alerts' run figures kept as run counters change (see _run_tally): the counters' change
    # log, the per-run marks, the log's triggers, and the figures seeded from the counters
    # already there (one read of the counters' value index, once). Creating the triggers locks
    # c4a_run_counters against writers until this commits, so the seed counts a table no worker
    # changes meanwhile; it waits only so long for that lock, as adding a column does.
    for table in (run_changes, run_marks):
        table.drop(conn, checkfirst=True)
        table.create(conn)
    _locking(conn, run_counters.name, lambda: _run_triggers_afresh(conn))
    _run_tally.seed(conn)


def _run_triggers_afresh(conn: Connection) -> None:
    _run_tally.drop_triggers(conn)
    _run_tally.create_triggers(conn)


def _v11(conn: Connection) -> None:
    # Names read by prefix sort by bytes on PostgreSQL (see tables._RangeName): in a database
    # whose collation is a language's, the run figures by trigger, by tool calls and by cost
    # were read empty, and _v10 seeded them without the counters it met by trigger. SQLite's
    # names always sorted by bytes.
    if conn.dialect.name != "postgresql":
        return

    def to_bytes_order() -> None:
        _run_tally.drop_triggers(conn)  # a trigger's WHEN names the column
        for table in (run_counters, tallies):
            as_declared = table.c.name.type.compile(dialect=conn.dialect)  # COLLATE "C" included
            conn.execute(
                text(
                    f"ALTER TABLE {_fold.qualified(conn, table.name)} "
                    f"ALTER COLUMN name TYPE {as_declared}"
                )
            )
        _run_tally.create_triggers(conn)

    # Both tables stay locked until this commits: no counter changes, no fold runs meanwhile.
    _locking(conn, run_counters.name, to_bytes_order)
    # The run figures counted again from the counters, as _v10 did: the log and the marks
    # afresh (the recount holds what the log had yet to fold), the old figures out.
    for table in (run_changes, run_marks):
        table.drop(conn)
        table.create(conn)
    conn.execute(delete(tallies).where(_run_tally.is_run_figure(tallies.c.name)))
    _run_tally.seed(conn)


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
        conn.execute(text(f"DROP INDEX IF EXISTS {_fold.qualified(conn, old)}"))
    for index in audit.indexes:
        index.create(conn, checkfirst=True)


def _v15(conn: Connection) -> None:
    # The in-doubt queue read by keyset, longest in doubt first (see tables.py).
    found = next(i for i in effects.indexes if i.name == "c4a_effects_doubt")
    found.create(conn, checkfirst=True)


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
    _tally.create_triggers(conn)
    _run_tally.create_triggers(conn)
    if conn.dialect.name == "postgresql":
        _live.create_triggers(conn)


def current_version(conn: Connection, schema: str | None = None) -> int:
    if not inspect(conn).has_table(schema_version.name, schema=schema):
        return 0
    found = conn.execute(select(schema_version.c.version)).scalar()
    return int(found or 0)


def migrate(engine: Engine, *, schema: str | None = None, target: int = CURRENT) -> tuple[int, int]:
    """Bring the ledger to ``target``; returns (version before, version after)."""
    with engine.begin() as conn:  # BEGIN IMMEDIATE on SQLite: the lock for the whole run
        if engine.dialect.name == "postgresql":
            conn.execute(text("SELECT pg_advisory_xact_lock(:id)"), {"id": _PG_LOCK_ID})
            if schema:
                conn.execute(text(f'CREATE SCHEMA IF NOT EXISTS "{schema}"'))
        before = current_version(conn, schema)
        refuse_newer(before)
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
