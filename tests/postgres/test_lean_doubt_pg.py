"""`call4agents doubt` on PostgreSQL takes the lean route (``storage/_lean_pg.py``, libpq alone).

As on SQLite (``tests/core/test_lean_doubt.py``, whose ledgers and owners these tests reuse): the
lean route answers as the full one does, byte for byte, sweeps the same actions with the same
notes, and leaves the rest to the full route. Each ledger is addressed two ways: by ``--schema``
(the statements name the schema's tables) and without it, by a URL whose ``options`` put the
schema first on the ``search_path`` (the statements' plain names find it, as the engine's do).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.parse
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy.engine import make_url

import call4agents as c4a
from call4agents.storage import _db, _lean, _lean_pg, _pg, _pgconn, reads
from call4agents.storage.migrations import CURRENT
from tests.conftest import Target
from tests.core import test_lean_doubt as twin
from tests.postgres.helpers import admin

run = twin.run  # the command by one route: "lean", "full", or "user"
owners = twin.owners  # owner texts: gone, alive, and claims of this process
CLOCK_SLACK = twin.CLOCK_SLACK
HOW = ["schema", "search_path"]


def address(target: Target, schema: str, how: str) -> tuple[str, str | None]:
    """The URL and ``--schema`` that name the ledger in ``schema``, one way or the other."""
    if how == "schema":
        return target.url, schema
    options = urllib.parse.quote(f"-c search_path={schema}")
    return f"{target.url}?options={options}", None


def where(url: str, schema: str | None) -> list[str]:
    return ["--url", url, *(["--schema", schema] if schema else [])]


@pytest.fixture
def schemas(pg_target: Target) -> Iterator[list[str]]:
    """Two ledgers alike, each in its own schema (the target's and one more)."""
    assert pg_target.schema
    names = [pg_target.schema, pg_target.schema + "_b"]
    for name in names:
        c4a.Ledger(pg_target.url, schema=name).close()
    try:
        yield names
    finally:
        with admin(pg_target) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{names[1]}" CASCADE')


def put(target: Target, schema: str, *rows: dict[str, Any]) -> None:
    """Write actions as they stand, without running anything."""
    with admin(target) as conn:
        for row in rows:
            names = ", ".join(row)
            marks = ", ".join("%s" for _ in row)
            conn.execute(
                f'INSERT INTO "{schema}".c4a_effects ({names}) VALUES ({marks})',
                tuple(row.values()),
            )


def put_doubts_and_a_lapsed_lease(target: Target, schema: str) -> None:
    """Four actions in doubt and one started whose lease lapsed ("z"), for `doubt` to sweep."""
    now = time.time()
    put(
        target,
        schema,
        *twin.settled_doubts(now),
        twin.action("z", now, state="started", lease_expires_at=now - 9),
    )


def rows_of(target: Target, schema: str) -> list[dict[str, Any]]:
    with admin(target) as conn:
        found = conn.execute(
            f'SELECT {", ".join(_lean.COLUMNS)} FROM "{schema}".c4a_effects ORDER BY seq'
        ).fetchall()
    return [dict(zip(_lean.COLUMNS, r, strict=True)) for r in found]


def open_lean(url: str, schema: str | None) -> _lean_pg.LeanPgLedger:
    lean = _lean_pg.open_ledger(url, schema)
    assert lean is not None
    return lean


# -- what the command prints ----------------------------------------------------------------------


@pytest.mark.parametrize("how", HOW)
def test_actions_in_doubt_read_alike_byte_for_byte(
    pg_target: Target, schemas: list[str], run: Any, how: str
) -> None:
    url, schema = address(pg_target, schemas[0], how)
    for argv in (["doubt"], ["doubt", "--json"], ["doubt", "--fail-if-any"]):
        lean = run("lean", *argv, *where(url, schema))
        assert lean == run("full", *argv, *where(url, schema))
        assert lean[0] == 0
    assert run("lean", "doubt", *where(url, schema))[1] == "No actions in doubt.\n"
    put(pg_target, schemas[0], *twin.settled_doubts(time.time()))
    for argv in (["doubt"], ["doubt", "--json"], ["--json", "doubt", "--fail-if-any"]):
        lean = run("lean", *argv, *where(url, schema))
        assert lean == run("full", *argv, *where(url, schema)), argv
        assert lean[0] == (3 if "--fail-if-any" in argv else 0)
        assert lean[2] == ""
    out = run("lean", "doubt", *where(url, schema))[1]
    assert "evidence: attempt 1 ended succeeded late" in out
    assert out.count("1h ago") == 4
    found = json.loads(run("lean", "doubt", "--json", *where(url, schema))[1])
    assert [item["key"][0] for item in found] == ["a", "b", "c", "e"]


@pytest.mark.parametrize("how", HOW)
def test_the_sweep_moves_the_same_actions_with_the_same_notes(
    pg_target: Target, schemas: list[str], run: Any, owners: dict[str, str], how: str
) -> None:
    now = time.time()
    for schema in schemas:
        put(pg_target, schema, *twin.started_actions(now, owners))
    lean_at, full_at = (address(pg_target, s, how) for s in schemas)
    lean = run("lean", "doubt", "--fail-if-any", *where(*lean_at))
    assert lean == run("full", "doubt", "--fail-if-any", *where(*full_at))
    assert lean[0] == 3
    assert lean[1].count("just now") == 5, lean[1]
    assert lean[1].count("its lease expired with no result") == 3
    lean_rows, full_rows = (rows_of(pg_target, s) for s in schemas)
    assert [r["state"] for r in lean_rows] == ["in_doubt"] * 7 + ["started"] * 3
    for a, b in zip(lean_rows, full_rows, strict=True):
        assert abs(a.pop("updated_at") - b.pop("updated_at")) < CLOCK_SLACK
        assert a == b
    lean_json = json.loads(run("lean", "doubt", "--json", *where(*lean_at))[1])
    full_json = json.loads(run("full", "doubt", "--json", *where(*full_at))[1])
    assert len(lean_json) == 7
    for a, b in zip(lean_json, full_json, strict=True):
        a_at, b_at = a.pop("updated_at"), b.pop("updated_at")
        assert a_at == b_at or a["key"][0] in "fghij"
        assert a == b
    assert run("full", "doubt", *where(*lean_at)) == run("lean", "doubt", *where(*lean_at))


# -- the statements, one by one, beside their SQLAlchemy twins ------------------------------------


@pytest.mark.parametrize("how", HOW)
def test_the_reads_read_what_the_stores_reads_read(
    pg_target: Target, schemas: list[str], owners: dict[str, str], how: str
) -> None:
    now = time.time()
    put(pg_target, schemas[0], *twin.started_actions(now, owners), *twin.settled_doubts(now)[2:])
    url, schema = address(pg_target, schemas[0], how)
    ledger = c4a.Ledger(url, schema=schema, auto_migrate=False)
    lean = open_lean(url, schema)
    try:
        expected = [tuple(row) for row in reads.started(ledger.store)]
        got = lean.started()
        assert sorted(got) == sorted(expected)  # neither asks for an order
        assert len(got) == 8
        assert lean.in_doubt() == [dict(m) for m in reads.in_doubt(ledger.store)]
        assert len(lean.in_doubt()) == 4
    finally:
        lean.close()
        ledger.close()


@pytest.mark.parametrize("how", HOW)
@pytest.mark.parametrize("case", list(twin.MARKS))
def test_marking_in_doubt_does_what_the_stores_mark_does(
    pg_target: Target, schemas: list[str], case: str, how: str
) -> None:
    now = time.time()
    put(pg_target, schemas[0], *twin.marking_rows(case, now))
    url, schema = address(pg_target, schemas[0], how)
    ledger = c4a.Ledger(url, schema=schema, auto_migrate=False)
    moved = twin.mark_both(case, open_lean(url, schema), ledger)
    twin.assert_marked_alike(rows_of(pg_target, schemas[0]), now, moved)


@pytest.mark.parametrize("how", HOW)
def test_a_move_wakes_whoever_waits_for_it(pg_target: Target, schemas: list[str], how: str) -> None:
    """A waiter (``_pg``'s listener) holds the key's shared lock and listens: the lean mark
    notifies it, as the store's mark does, and says nothing when nobody holds the lock."""
    now = time.time()
    # Keys of this test alone: without a schema, every ledger's waiters share one channel and
    # one space of lock ids, and a twin test marking "p" * 64 would wake this waiter too.
    keys = {k: uuid.uuid4().hex * 2 for k in "pqr"}
    put(
        pg_target,
        schemas[0],
        *(
            {**twin.action(k, now, state="started", lease_expires_at=now - 60), "key": key}
            for k, key in keys.items()
        ),
    )
    url, schema = address(pg_target, schemas[0], how)
    ledger = c4a.Ledger(url, schema=schema, auto_migrate=False)
    lean = open_lean(url, schema)
    channel = _pg.channel_for(schema)
    try:
        with admin(pg_target) as waiter:
            waiter.execute(f"LISTEN {channel}")
            for key in (keys["p"], keys["q"]):
                lock = _pg.lock_id(schema, key)
                waiter.execute("SELECT pg_advisory_lock_shared(%s, %s)", (_pg.LOCK_CLASS, lock))
            assert lean.mark_in_doubt(keys["p"], 1, "why", only_if_expired=True)
            assert ledger.store.mark_in_doubt(keys["q"], 1, "why", only_if_expired=True)
            assert lean.mark_in_doubt(keys["r"], 1, "why", only_if_expired=True)  # unwatched
            heard = [n.payload for n in waiter.notifies(timeout=2.0, stop_after=3)]
    finally:
        lean.close()
        ledger.close()
    assert heard == [keys["p"], keys["q"]]


def test_the_connection_is_set_up_as_the_engines(pg_target: Target, schemas: list[str]) -> None:
    ledger = c4a.Ledger(pg_target.url, schema=schemas[0], auto_migrate=False)
    lean = open_lean(pg_target.url, schemas[0])
    try:
        with ledger.engine.connect() as conn:
            engine_conn: Any = conn.connection.driver_connection
            for setting in ("jit", "application_name", "synchronous_commit", "search_path"):
                mine = lean._conn.execute(f"SHOW {setting}")
                assert mine == [engine_conn.execute(f"SHOW {setting}").fetchone()], setting
            info = {
                o.keyword.decode(): None if o.val is None else o.val.decode()
                for o in engine_conn.pgconn.info
            }
            # psycopg looks the host's address up itself and hands libpq the answer; libpq
            # alone looks it up as it connects. Every other setting is the same.
            assert info.pop("hostaddr") is not None
            mine = lean._conn.settings()
            assert mine.pop("hostaddr") is None
            assert mine == info
            assert info["connect_timeout"] == "10"
        assert lean._conn.execute("SHOW jit") == [("off",)]
        clock = float(lean._conn.execute(f"SELECT {_pgconn.NOW}")[0][0] or "nan")
        assert abs(clock - ledger.store.now()) < CLOCK_SLACK
    finally:
        lean.close()
        ledger.close()
    defaults = c4a.Ledger.__init__.__kwdefaults__ or {}
    assert defaults["durability"] == _lean_pg._DURABILITY


# -- the URL, read as SQLAlchemy reads it ---------------------------------------------------------

PASSWORD = urllib.parse.quote("a!b@c$d()e*_,/:;=?@ff[]22", safe="")


@pytest.mark.parametrize(
    "url",
    [
        "postgresql+psycopg://u@h/db",
        "postgresql://u:p@h:5433/db",
        f"postgresql+psycopg://us%40er:{PASSWORD}@db.example.com:5432/my%20db",
        "postgresql+psycopg://u:p:q@h/db",
        "postgresql+psycopg://:p@h/db",
        "postgresql+psycopg://u:@h/db",
        "postgresql+psycopg:///db?host=/var/run/postgresql",
        "postgresql+psycopg://h/db?sslmode=require&connect_timeout=3&application_name=x+y",
        "postgresql+psycopg://h/db?options=-c%20search_path%3Ds1&keepalives_idle=",
        "postgresql+psycopg://u@h/a/b",
        "postgresql+psycopg://u@h/db?sslmode=require&sslmode=disable",
        "postgresql+psycopg://u@h1,h2/db",
        "postgresql+psycopg://u@[::1]:5432/db",
        "postgresql+psycopg://u@h:/db",
        "postgresql+psycopg://u@h:port/db",
        "postgresql+psycopg://u:p@ss@h/db",
        "postgresql+psycopg://u:p/ss@h/db",
        "postgresql+psycopg://u:p?ss@h/db",
        "postgresql+psycopg://u@h/",
        "postgresql+psycopg://u@h",
        "postgresql+psycopg://u@h/d%40b",
        "postgresql+psycopg://u@h/db?a-b=1",
        "postgresql+psycopg://u@h%2Fx/db",
        "postgres://u@h/db",
        "postgresql+asyncpg://u@h/db",
        "sqlite:///x.db",
    ],
)
def test_the_lean_route_reads_a_url_as_the_full_one_does(url: str) -> None:
    lean = _lean_pg.connect_kwargs(url)
    if lean is None:
        return  # left to the full route
    # What the CLI's Ledger gives psycopg: the URL parsed, written out, parsed again.
    parsed = _db.parse_url(_db.parse_url(url).render_as_string(hide_password=False))
    engine = _db.make_engine(
        parsed, durability="power", schema=None, busy_timeout=30.0, allow_network_fs=False
    )
    try:
        cargs, params = engine.dialect.create_connect_args(engine.url)
    finally:
        engine.dispose()
    params.pop("context", None)
    assert not cargs
    assert lean == {**params, **_db.pg_connect_args(parsed, "power")}


# -- what the lean route leaves to the full one ---------------------------------------------------


def test_errors_are_the_full_routes(
    pg_target: Target, schemas: list[str], run: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = make_url(pg_target.url)
    empty = "c4a_t_" + uuid.uuid4().hex[:12]
    unreachable = pg_target.url.replace(f":{base.port}/", ":1/") + "?connect_timeout=2"
    unencoded = f"postgresql+psycopg://someone:a@b/c@{base.host}:{base.port}/{base.database}"
    with admin(pg_target) as conn:
        conn.execute(f'CREATE SCHEMA "{empty}"')
    try:
        cases = {
            "no tables": ((pg_target.url, empty), "there is no Call4Agents ledger at"),
            "no schema": ((pg_target.url, empty + "_x"), "there is no Call4Agents ledger at"),
            "a bad schema name": ((pg_target.url, "a-b"), "is not a plain identifier"),
            "unreachable": ((unreachable, schemas[0]), "cannot open the ledger at"),
            "an unencoded password": ((unencoded, None), "percent-encode it"),
            "no such database": (
                (pg_target.url.replace(f"/{base.database}", "/no_such_db"), None),
                "cannot open the ledger at",
            ),
        }
        for name, ((url, schema), message) in cases.items():
            assert _lean_pg.open_ledger(url, schema) is None, name
            found = run("user", "doubt", *where(url, schema))
            assert found == run("full", "doubt", *where(url, schema)), name
            assert found[0] == 2, name
            assert message in found[2], name
    finally:
        with admin(pg_target) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{empty}" CASCADE')
    url, schema = pg_target.url, schemas[0]
    for number, message in (
        (CURRENT + 1, "written by a newer Call4Agents"),
        (CURRENT - 1, "run `call4agents migrate`"),
    ):
        with admin(pg_target) as conn:
            conn.execute(f'UPDATE "{schema}".c4a_schema SET version = %s', (number,))
        assert _lean_pg.open_ledger(url, schema) is None
        found = run("user", "doubt", "--json", *where(url, schema))
        assert found == run("full", "doubt", "--json", *where(url, schema))
        assert (found[0], found[1]) == (2, "")
        assert message in found[2]
    with admin(pg_target) as conn:
        conn.execute(f'UPDATE "{schema}".c4a_schema SET version = %s', (CURRENT,))
    assert run("lean", "doubt", *where(url, schema))[0] == 0
    # Ledger refuses an ill-formed previous secret on opening; so does `doubt`, either way.
    monkeypatch.setenv("CALL4AGENTS_PREVIOUS_SECRET", "old-" + "y" * 40)
    found = run("user", "doubt", *where(url, schema))
    assert found == run("full", "doubt", *where(url, schema))
    assert "needs CALL4AGENTS_PREVIOUS_SECRET_UNTIL" in found[2]


def test_a_fault_after_opening_is_the_stores_one_line(
    pg_target: Target, schemas: list[str]
) -> None:
    lean = open_lean(pg_target.url, schemas[0])
    with admin(pg_target) as conn:
        conn.execute(f'DROP TABLE "{schemas[0]}".c4a_effects CASCADE')
    with lean, pytest.raises(c4a.LedgerError, match=r"^the ledger database failed: relation "):
        lean.started()


@pytest.mark.parametrize("how", HOW)
def test_the_lean_route_imports_neither_sqlalchemy_nor_psycopg(
    pg_target: Target, schemas: list[str], how: str
) -> None:
    put_doubts_and_a_lapsed_lease(pg_target, schemas[0])
    url, schema = address(pg_target, schemas[0], how)
    script = (
        "import sys\n"
        "from call4agents.facade.cli import main\n"
        "code = main(sys.argv[1:])\n"
        "drivers = ('sqlalchemy', 'psycopg', 'psycopg_binary')\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in drivers)\n"
        "print('LOADED', code, loaded, file=sys.stderr)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "CALL4AGENTS_URL"}
    for argv in (["doubt"], ["doubt", "--json", "--fail-if-any"]):
        done = subprocess.run(
            [sys.executable, "-c", script, *argv, *where(url, schema)],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            env=env,
        )
        expected = 3 if "--fail-if-any" in argv else 0
        assert done.stderr.strip() == f"LOADED {expected} []", done.stderr
        assert "TimeoutError: payment gateway" in done.stdout
    assert rows_of(pg_target, schemas[0])[-1]["note"] == "its lease expired with no result"
    # Where the lean route cannot serve (no tables in that schema), the same script loads it.
    done = subprocess.run(
        [sys.executable, "-c", script, "doubt", "--url", url, "--schema", "c4a_none_here"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )
    assert "'sqlalchemy'" in done.stderr.splitlines()[-1]
