"""The test suite's own PostgreSQL schemas (tests/schemas.py): a schema handed back after a test is
kept only if it empties into exactly what a new ledger is, and a test that names its schema first
gets one made from nothing."""

from __future__ import annotations

import contextlib
import threading
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

import call4agents as c4a
from call4agents.storage.migrations import CURRENT, migrate
from tests.conftest import Target, make_target, postgres_url
from tests.postgres.helpers import admin
from tests.schemas import application_name, pool_for


def _contents(conn: psycopg.Connection[Any], schema: str) -> dict[str, list[tuple[Any, ...]]]:
    tables = conn.execute(
        "SELECT relname FROM pg_class WHERE relnamespace = %s::regnamespace AND relkind = 'r'",
        (schema,),
    ).fetchall()
    return {t: conn.execute(f'SELECT * FROM "{schema}".{t}').fetchall() for (t,) in tables}


def _exists(conn: psycopg.Connection[Any], schema: str) -> bool:
    found = conn.execute("SELECT FROM pg_namespace WHERE nspname = %s", (schema,)).fetchone()
    return found is not None


def _use(ledger: c4a.Ledger) -> None:
    """Rows in every kind of table: actions, a failure, an approval asked and given, a budget."""
    send = c4a.effect(name="send", ledger=ledger)(lambda to: f"sent {to}")
    wire = c4a.effect(name="wire", approval=True, ledger=ledger)(lambda n: n)

    def flaky() -> None:
        raise ConnectionError("refused: not sent")

    with c4a.run("used", ledger=ledger, budget=c4a.Budget(max_tool_calls=10)):
        send("a")
        with pytest.raises(ConnectionError):
            c4a.effect(name="flaky", ledger=ledger)(flaky)()
        with pytest.raises(c4a.ApprovalRequired) as asked:
            wire(1)
        ledger.approve(asked.value.request.ticket, by="ann")
        wire(1)


def test_a_kept_schema_holds_what_a_new_ledger_holds(tmp_path: Path) -> None:
    pool = pool_for(postgres_url())
    schema = pool.take()
    ledger = c4a.Ledger(pool.url, schema=schema)
    _use(ledger)
    ledger.close()
    with admin(Target("postgres", pool.url)) as conn:
        used = _contents(conn, schema)
        assert all(used[t] for t in ("c4a_effects", "c4a_approvals", "c4a_changes"))
        salt = dict(used["c4a_meta"])["key_salt"]
        pool.give_back(schema)
        assert _exists(conn, schema)
        kept = _contents(conn, schema)
        fresh = pool_for(postgres_url())._make()  # as the ledger makes one from nothing
        try:
            new = _contents(conn, fresh)
        finally:
            pool.drop(fresh)
    assert kept.keys() == new.keys()
    for table, rows in kept.items():
        if table == "c4a_meta":  # one key salt, drawn again
            assert [name for name, _ in rows] == ["key_salt"]
            assert rows[0][1] != salt
            assert len(rows[0][1]) == len(salt)
        else:
            assert rows == new[table], table
    assert kept["c4a_schema"] == [(CURRENT,)]
    assert pool.take() == schema  # the next test's
    again = c4a.Ledger(pool.url, schema=schema)
    try:
        send = c4a.effect(name="send", ledger=again)(lambda to: f"sent {to}")
        with c4a.run("used", ledger=again):
            assert send("a") == "sent a"
        assert [(e.state, e.attempt) for e in again.effects("used")] == [("succeeded", 1)]
        with again.engine.connect() as conn2:
            seq = conn2.exec_driver_sql(f'SELECT seq FROM "{schema}".c4a_effects').scalar()
        assert seq == 1  # the sequences start again
    finally:
        again.close()
        pool.give_back(schema)


@pytest.mark.parametrize(
    "change",
    [
        'ALTER TABLE "{s}".c4a_effects DROP COLUMN note',
        # the same columns in another order: a SELECT * would read them otherwise
        'ALTER TABLE "{s}".c4a_effects DROP COLUMN note, ADD COLUMN note text',
        'CREATE INDEX extra ON "{s}".c4a_runs (run_id)',
        'CREATE TABLE "{s}".extra (n integer)',
        'CREATE SEQUENCE "{s}".extra',
        'CREATE FUNCTION "{s}".extra() RETURNS integer LANGUAGE sql AS $$ SELECT 1 $$',
        'UPDATE "{s}".c4a_schema SET version = 4',
        'ALTER TABLE "{s}".c4a_effects DISABLE TRIGGER ALL',
        'DROP SCHEMA "{s}" CASCADE',
        # what the planner would read: statistics, and a table grown past a few pages
        'ANALYZE "{s}".c4a_runs',
        "INSERT INTO \"{s}\".c4a_meta SELECT 'filler' || i, repeat('x', 1000)"
        " FROM generate_series(1, 100) i",
    ],
)
def test_a_schema_a_test_changed_is_dropped(change: str) -> None:
    pool = pool_for(postgres_url())
    schema = pool.take()
    with admin(Target("postgres", pool.url)) as conn:
        conn.execute(change.format(s=schema))
        pool.give_back(schema)
        assert not _exists(conn, schema)


def test_a_schema_another_session_holds_is_dropped() -> None:
    pool = pool_for(postgres_url())
    schema = pool.take()
    with admin(Target("postgres", pool.url)) as conn:
        holder = admin(Target("postgres", pool.url))
        holder.execute("BEGIN")
        holder.execute(f'SELECT * FROM "{schema}".c4a_effects')  # a lock until it ends
        # The drop waits for the holder, as it always did: let it go once the drop waits.
        release = threading.Thread(target=_close_when_waited_for, args=(conn, holder))
        release.start()
        pool.give_back(schema)
        release.join()
        assert not _exists(conn, schema)


def _close_when_waited_for(conn: psycopg.Connection[Any], holder: Any) -> None:
    waiting = (
        "SELECT count(*) FROM pg_stat_activity"
        " WHERE application_name = %s AND wait_event_type = 'Lock'"
    )
    deadline = time.monotonic() + 60
    while conn.execute(waiting, (application_name(),)).fetchone() != (1,):
        assert time.monotonic() < deadline, "the schema's drop never waited for its holder"
        time.sleep(0.05)
    holder.close()


@pytest.mark.parametrize("new_schema", [False, True])
def test_a_first_open_gets_a_kept_schema_unless_named_first_or_marked(
    tmp_path: Path, new_schema: bool
) -> None:
    pool = pool_for(postgres_url())
    kept = pool.take()
    pool.give_back(kept)
    with contextlib.contextmanager(make_target)("postgres", tmp_path, new_schema=new_schema) as t:
        t.open()
        assert (t.schema == kept) is not new_schema
    named = contextlib.contextmanager(make_target)("postgres", tmp_path)
    with named as target, admin(target) as conn:
        assert target.schema not in (None, kept)
        assert not _exists(conn, str(target.schema))  # nothing made for it yet
        with pytest.raises(c4a.LedgerError, match="there is no Call4Agents ledger"):
            target.open(auto_migrate=False)
        ledger = target.open()
        assert migrate(ledger.engine, schema=target.schema) == (CURRENT, CURRENT)
        assert _exists(conn, str(target.schema))


def test_a_connection_the_server_dropped_is_made_again() -> None:
    # As after a serial test restarted the server: the next schema handed back still is kept.
    pool = pool_for(postgres_url())
    schema = pool.take()
    with admin(Target("postgres", pool.url)) as conn:
        ended = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
            (application_name(),),
        ).fetchall()
        assert ended == [(True,)]
        pool.give_back(schema)
        assert _exists(conn, schema)
    assert pool.take() == schema
    pool.give_back(schema)
