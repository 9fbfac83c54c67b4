"""What a fresh process loads: the start-up of `import call4agents` and of the CLI's commands.

Each check runs a new interpreter and looks at ``sys.modules`` after the work: a module that
comes back (an eager import added somewhere in the chain) fails here, where a timing would only
drift. The figures are in docs/speed.md ("Start-up"), from benchmarks/bench_startup.py.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import subprocess
import sys

import pytest

from tests.conftest import Target

# What to look for: SQLAlchemy itself, each database's SQLAlchemy dialect, and the driver.
WATCHED = ("sqlalchemy", "sqlalchemy.dialects.postgresql", "sqlalchemy.dialects.sqlite", "psycopg")


def loaded_after(code: str, env: dict[str, str] | None = None) -> set[str]:
    """The modules of WATCHED that a new interpreter has loaded after running ``code``."""
    probe = (
        "import contextlib, io, json, sys\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        + "".join(f"    {line}\n" for line in code.splitlines())
        + f"print(json.dumps([m for m in {WATCHED!r} if m in sys.modules]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, env=env
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return set(json.loads(done.stdout.splitlines()[-1]))


def cli(*args: str) -> str:
    """``code`` for loaded_after: one CLI command run in the process, its exit code checked."""
    return (
        "from call4agents.facade.cli import main\n"
        f"code = main({list(args)!r})\n"
        "assert code in (0, 3), code"
    )


def test_importing_the_package_loads_no_sqlalchemy() -> None:
    assert loaded_after("import call4agents") == set()


@pytest.mark.parametrize("args", [["--help"], ["--version"], ["doubt", "--help"]])
def test_help_and_version_load_no_sqlalchemy(args: list[str]) -> None:
    assert loaded_after(cli(*args).replace("(0, 3)", "(0,)")) == set()


def test_a_sqlite_command_loads_no_postgresql_dialect(sqlite_target: Target) -> None:
    """SQLAlchemy's PostgreSQL dialect package imports asyncpg's, pg8000's and psycopg2's
    modules (some 35 ms): a SQLite ledger must not pay for them, as it did while the partial
    indexes named ``postgresql_where=`` in tables.py."""
    sqlite_target.open().close()  # made and migrated
    found = loaded_after(cli("doubt", "--url", sqlite_target.url), sqlite_target.env())
    assert found == {"sqlalchemy", "sqlalchemy.dialects.sqlite"}


def test_a_postgresql_command_loads_no_sqlite_dialect(pg_target: Target) -> None:
    pg_target.open().close()
    assert pg_target.schema is not None
    found = loaded_after(
        cli("doubt", "--url", pg_target.url, "--schema", pg_target.schema), pg_target.env()
    )
    assert found == {"sqlalchemy", "sqlalchemy.dialects.postgresql", "psycopg"}


def test_migrate_still_makes_the_partial_indexes(sqlite_target: Target) -> None:
    """Their conditions are given before DDL, not when tables.py loads (see partial_conditions):
    a ledger made by `migrate` in a new process still has them."""
    sqlite_target.open().close()
    path = sqlite_target.url.removeprefix("sqlite:///")
    import sqlite3

    with sqlite3.connect(path) as conn:
        made = dict(conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'index'"))
    assert "WHERE state IN ('started', 'in_doubt')" in made["c4a_effects_open"]
    assert "WHERE state = 'in_doubt'" in made["c4a_effects_doubt"]


def help_of(parser: argparse.ArgumentParser, *args: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        parser.parse_args([*args, "--help"])
    return out.getvalue()


def test_each_command_alone_parses_as_in_the_whole_parser() -> None:
    """A run builds only its command's parser (build_parser(only)): the same options and help
    as in the whole parser. (Making a command not in COMMANDS fails an assertion.)"""
    from call4agents.facade.cli import COMMANDS, build_parser

    whole = build_parser()
    for name in sorted(COMMANDS):
        assert help_of(build_parser(name), name) == help_of(whole, name)
        assert name in help_of(whole)  # listed by `call4agents --help`
