"""The lean route's driver (``storage/_libpq.py``): libpq through ``ctypes``, on a real server.

What it reads must be what psycopg reads, its faults must reach the user as the store's one-line
error, and where no libpq loads, `doubt` must still answer, by the full route.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

import call4agents as c4a
from call4agents.storage import _lean_pg, _libpq
from tests.conftest import Target
from tests.core import test_lean_doubt as twin
from tests.postgres.helpers import admin
from tests.postgres.test_lean_doubt_pg import (
    open_lean,
    put,
    put_doubts_and_a_lapsed_lease,
    rows_of,
    schemas,
    where,
)

run = twin.run
__all__ = ["run", "schemas"]  # fixtures used here by name


@pytest.fixture
def conn(pg_target: Target) -> Iterator[_libpq.Connection]:
    kwargs = _lean_pg.connect_kwargs(pg_target.url)
    assert kwargs is not None
    opened = _libpq.connect(kwargs)
    try:
        yield opened
    finally:
        opened.close()


def test_values_read_as_psycopg_reads_them(pg_target: Target, conn: _libpq.Connection) -> None:
    sql = (
        "SELECT %s::text, %s::int8, %s::float8, NULL::text, 'naïve ☃'::text, "
        "0.1::float8 + 0.2::float8, clock_timestamp()::text <> ''"
    )
    params = ("quote ' and back\\slash ☃", 2**40, 1 / 3)
    mine = conn.execute(_libpq.numbered(sql), params)
    with admin(pg_target) as other:
        theirs = other.execute(sql, params).fetchall()
    booleans = {True: "t", False: "f"}
    assert mine == [tuple(None if v is None else booleans.get(v, str(v)) for v in theirs[0])]
    assert [float(mine[0][2] or ""), float(mine[0][5] or "")] == [theirs[0][2], theirs[0][5]]
    assert conn.execute("SELECT 1 WHERE false") == []
    assert conn.execute("SET jit = off") == []


def test_a_failed_statement_is_one_plain_line_and_the_connection_goes_on(
    conn: _libpq.Connection,
) -> None:
    with pytest.raises(_libpq.PgError, match=r'^relation "no_such_table" does not exist$'):
        conn.execute("SELECT * FROM no_such_table")
    with pytest.raises(_libpq.PgError, match=r"^invalid input syntax for type integer"):
        conn.execute("SELECT $1::int", ("x",))
    assert conn.execute("SELECT 1") == [("1",)]  # each statement is a transaction of its own


def test_a_lost_connection_reaches_the_user_as_the_stores_one_line(
    pg_target: Target, schemas: list[str]
) -> None:
    lean = open_lean(pg_target.url, schemas[0])
    pid = lean._conn.execute("SELECT pg_backend_pid()")[0][0]
    with admin(pg_target) as other:
        other.execute("SELECT pg_terminate_backend(%s::int)", (pid,))
    time.sleep(0.2)
    with lean, pytest.raises(c4a.LedgerError, match=r"^the ledger database failed: \S"):
        lean.in_doubt()
    with pytest.raises(_libpq.PgError, match="closed"):
        lean._conn.execute("SELECT 1")


def test_a_refused_connection_says_why() -> None:
    refused = {"host": "127.0.0.1", "port": "1", "dbname": "x", "connect_timeout": "2"}
    with pytest.raises(_libpq.PgError, match=r"port 1 failed: Connection refused"):
        _libpq.connect(refused)


def test_placeholders_are_numbered_in_order() -> None:
    assert _libpq.numbered("a = %s AND b IN (%s, %s)") == "a = $1 AND b IN ($2, $3)"
    assert _libpq.numbered("SELECT 1") == "SELECT 1"
    with pytest.raises(ValueError, match="other than %s"):
        _libpq.numbered("SELECT %d, %s")


def test_without_a_libpq_the_full_route_answers(
    pg_target: Target, schemas: list[str], run: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    put_doubts_and_a_lapsed_lease(pg_target, schemas[0])
    monkeypatch.setattr(_libpq, "_candidates", lambda: ["no-such-libpq.so"])
    _libpq._library.cache_clear()
    try:
        with pytest.raises(_libpq.LibpqMissing):
            _libpq.connect({"dbname": "x"})
        assert _lean_pg.open_ledger(pg_target.url, schemas[0]) is None
        found = run("user", "doubt", "--fail-if-any", *where(pg_target.url, schemas[0]))
    finally:
        _libpq._library.cache_clear()
    assert found[0] == 3
    assert "TimeoutError: payment gateway" in found[1]
    assert rows_of(pg_target, schemas[0])[-1]["note"] == "its lease expired with no result"


def test_a_client_encoding_other_than_utf8_takes_the_full_route(
    pg_target: Target, schemas: list[str], run: Any
) -> None:
    put(pg_target, schemas[0], *twin.settled_doubts(time.time()))
    latin = f"{pg_target.url}?client_encoding=LATIN1"
    assert _lean_pg.open_ledger(latin, schemas[0]) is None
    found = run("user", "doubt", *where(latin, schemas[0]))
    assert found == run("full", "doubt", *where(pg_target.url, schemas[0]))
    assert found[0] == 0


def test_a_server_that_never_answers_is_waited_for_once(run: Any) -> None:
    """A listener that takes connections and says nothing: the lean route's connect times out,
    and `doubt` reports it in the full route's words instead of connecting (and waiting) again."""
    import socket
    import threading

    listener = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []

    def take() -> None:
        while True:
            try:
                accepted.append(listener.accept()[0])
            except OSError:
                return  # closed

    threading.Thread(target=take, daemon=True).start()
    port = listener.getsockname()[1]
    url = f"postgresql+psycopg://someone:s3cret@127.0.0.1:{port}/db?connect_timeout=1"
    try:
        code, out, err = run("user", "doubt", "--url", url)
    finally:
        listener.close()
        for conn in accepted:
            conn.close()
    assert (code, out) == (2, "")
    assert len(accepted) == 1  # the full route did not try again
    assert err.startswith(
        f"call4agents: error: cannot open the ledger at postgresql+psycopg://someone:***@"
        f"127.0.0.1:{port}/db?connect_timeout=1: "
    ), err
    assert "timeout expired" in err
    assert "s3cret" not in err
    assert "Check that the database is reachable" in err
