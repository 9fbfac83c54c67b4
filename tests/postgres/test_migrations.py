"""Migrations on a shared PostgreSQL server: once under a crowd, all or nothing, newer refused."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import call4agents as c4a
from call4agents.storage import migrations
from call4agents.storage.migrations import CURRENT
from tests.conftest import Target, run_child
from tests.postgres.helpers import admin


def schema_version(target: Target) -> int | None:
    with admin(target) as conn:
        found = conn.execute(
            "SELECT to_regclass(%s) IS NOT NULL", (f'"{target.schema}".c4a_schema',)
        ).fetchone()
        if not found or not found[0]:
            return None
        row = conn.execute(f'SELECT version FROM "{target.schema}".c4a_schema').fetchone()
        return int(row[0]) if row else None


def test_eight_processes_migrate_a_fresh_schema_once(pg_target: Target, tmp_path: Path) -> None:
    gate = tmp_path / "go"
    starter = textwrap.dedent(
        """
        import pathlib, sys, time
        from call4agents.facade.cli import main
        while not pathlib.Path(sys.argv[1]).exists():
            time.sleep(0.002)
        sys.exit(main(sys.argv[2:]))
        """
    )
    argv = ["migrate", "--url", pg_target.url, "--schema", str(pg_target.schema), "--json"]
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", starter, str(gate), *argv],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(8)
    ]
    gate.touch()
    outputs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0] * 8, [err for _, err in outputs]
    moves = sorted((r["before"], r["after"]) for r in (json.loads(out) for out, _ in outputs))
    assert moves == [(0, CURRENT)] + [(CURRENT, CURRENT)] * 7  # exactly one of them migrated
    assert schema_version(pg_target) == CURRENT
    with pg_target.open() as ledger:  # and the result is a working ledger
        assert ledger.effects() == []


BROKEN = textwrap.dedent(
    """
    import os, sys
    from sqlalchemy import text
    import call4agents as c4a
    from call4agents.storage import migrations

    def broken(conn):
        schema = os.environ["C4A_TEST_SCHEMA"]
        conn.execute(text(f'ALTER TABLE "{schema}".c4a_effects ADD COLUMN half_done integer'))
        raise RuntimeError("migration failed half way")

    ledger = c4a.Ledger(os.environ["C4A_TEST_URL"], schema=os.environ["C4A_TEST_SCHEMA"])
    migrations.MIGRATIONS.append(broken)  # a release with one more, failing, migration
    migrations.CURRENT += 1
    try:
        migrations.migrate(ledger.engine, schema=ledger.schema)
    except RuntimeError as exc:
        print(exc)
        sys.exit(7)
    """
)


def test_failed_migration_leaves_the_version_and_tables_alone(
    pg_target: Target, tmp_path: Path
) -> None:
    script = tmp_path / "broken_migration.py"
    script.write_text(BROKEN)
    done = run_child(script, env=pg_target.env())
    assert done.returncode == 7, done.stderr
    assert "failed half way" in done.stdout
    assert schema_version(pg_target) == CURRENT
    with admin(pg_target) as conn:
        columns = conn.execute(
            "SELECT column_name FROM information_schema.columns "
            "WHERE table_schema = %s AND table_name = 'c4a_effects'",
            (pg_target.schema,),
        ).fetchall()
    assert "half_done" not in {c for (c,) in columns}  # its first step was rolled back too
    with pg_target.open() as ledger:  # still usable by this version
        assert ledger.effects() == []


def test_newer_schema_is_refused_by_every_entry_point(pg_target: Target) -> None:
    pg_target.open().close()
    with admin(pg_target) as conn:
        conn.execute(f'UPDATE "{pg_target.schema}".c4a_schema SET version = %s', (CURRENT + 1,))
    with pytest.raises(c4a.LedgerError, match="newer Call4Agents"):
        pg_target.open()
    with pytest.raises(c4a.LedgerError, match="newer Call4Agents"):
        pg_target.open(auto_migrate=False)
    assert schema_version(pg_target) == CURRENT + 1  # and left as it was


def test_two_schemas_in_one_database_are_two_ledgers(pg_target: Target) -> None:
    other = Target("postgres", pg_target.url, schema=f"{pg_target.schema}_b")
    try:
        first, second = pg_target.open(), other.open()

        @c4a.effect(name="send_email", ledger=first)
        def send_first(to: str) -> str:
            return "first"

        @c4a.effect(name="send_email", ledger=second)
        def send_second(to: str) -> str:
            return "second"

        with c4a.run("same-run"):
            assert send_first("bob@example.com") == "first"
            assert send_second("bob@example.com") == "second"  # same key, another ledger
        assert [r.result for r in first.effects()] == ["first"]
        assert [r.result for r in second.effects()] == ["second"]
    finally:
        for ledger in other.opened:
            ledger.close()
        with admin(pg_target) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{other.schema}" CASCADE')


def test_opening_a_current_ledger_does_not_queue_behind_another_migration(
    pg_target: Target,
) -> None:
    # Every migration on the server takes one advisory lock. A ledger already at the current
    # version opens without it, so a schema being created elsewhere holds up no other ledger's
    # open, nor is a development build's ledger kept waiting to be refused; a ledger that needs
    # work still waits for the lock (here: until lock_timeout).
    pg_target.open().close()
    waits = {"options": "-c lock_timeout=2000"}
    fresh = Target("postgres", pg_target.url, schema=f"{pg_target.schema}_new")
    with admin(pg_target) as holder:
        holder.execute("SELECT pg_advisory_lock(%s)", (migrations._PG_LOCK_ID,))
        with pg_target.open(connect_args=waits) as ledger:
            assert ledger.effects() == []
        with pytest.raises(c4a.LedgerError, match="lock timeout"):
            fresh.open(connect_args=waits, open_retry=0)
        holder.execute(f'UPDATE "{pg_target.schema}".c4a_schema SET version = 12')
        with pytest.raises(c4a.LedgerError, match="development build"):
            pg_target.open(connect_args=waits, open_retry=0)
    with admin(pg_target) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{fresh.schema}" CASCADE')
