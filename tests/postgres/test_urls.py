"""Connection URLs: an awkward password and TLS settings reach libpq intact, and never show."""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy.engine import make_url

import call4agents as c4a
from call4agents.facade import cli
from tests.conftest import Target
from tests.postgres.helpers import admin, unavailable

PASSWORD = "a!b@c$d()e*_,/:;=?@ff[]22"
ENCODED = urllib.parse.quote(PASSWORD, safe="")
# Pieces a URL split in the wrong place would print as a host, a database or a query.
FRAGMENTS = [PASSWORD, ENCODED, "c$d()e*_,", "ff[]22", "a!b@c"]


@pytest.fixture
def role(pg_target: Target) -> Iterator[str]:
    """A login role with the awkward password, allowed to make the test's schema."""
    name = "c4a_pw_" + secrets.token_hex(4)
    with admin(pg_target) as conn:
        database = conn.info.dbname
        conn.execute(f"CREATE ROLE {name} LOGIN PASSWORD '{PASSWORD}'")
        conn.execute(f'GRANT CREATE ON DATABASE "{database}" TO {name}')
    try:
        yield name
    finally:
        with admin(pg_target) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{pg_target.schema}" CASCADE')
            conn.execute(f"DROP OWNED BY {name}")
            conn.execute(f"DROP ROLE {name}")


def url_for(target: Target, role: str, query: str = "") -> str:
    base = make_url(target.url)
    where = f"{base.host}:{base.port or 5432}/{base.database}"
    return f"postgresql+psycopg://{role}:{ENCODED}@{where}{query}"


def libpq_settings(ledger: c4a.Ledger) -> dict[str, str]:
    """What libpq was really given for a pooled connection of this ledger."""
    with ledger.engine.connect() as conn:
        pgconn = conn.connection.driver_connection.pgconn  # type: ignore[union-attr]
        return {o.keyword.decode(): (o.val or b"").decode() for o in pgconn.info}


def assert_hidden(text: str) -> None:
    for piece in FRAGMENTS:
        assert piece not in text, f"{piece!r} leaked into: {text}"


@pytest.mark.parametrize("sslmode", ["disable", "prefer"])
def test_awkward_password_and_sslmode_reach_libpq(
    pg_target: Target, role: str, sslmode: str
) -> None:
    ledger = c4a.Ledger(url_for(pg_target, role, f"?sslmode={sslmode}"), schema=pg_target.schema)
    pg_target.opened.append(ledger)

    @c4a.effect(name="send_email", ledger=ledger)
    def send_email(to: str) -> str:
        return "sent"

    with c4a.run("urls", ledger=ledger):
        assert send_email("bob@example.com") == "sent"
    settings = libpq_settings(ledger)
    assert (settings["user"], settings["password"], settings["sslmode"]) == (
        role,
        PASSWORD,
        sslmode,
    )
    assert_hidden(ledger.url + repr(ledger))
    assert "***" in ledger.url


def test_password_never_printed(
    pg_target: Target, role: str, caplog: pytest.LogCaptureFixture, capsys: Any
) -> None:
    good = url_for(pg_target, role)
    unreachable = good.replace(f":{make_url(good).port}/", ":1/") + "?connect_timeout=2"
    for name in ("sqlalchemy", "psycopg", "call4agents"):  # everything they log
        caplog.set_level(logging.DEBUG, logger=name)
    with caplog.at_level(logging.DEBUG):
        ledger = c4a.Ledger(good, schema=pg_target.schema)
        pg_target.opened.append(ledger)
        with pytest.raises(c4a.LedgerError) as refused:  # tried a few times, then one error
            c4a.Ledger(unreachable, schema=pg_target.schema, open_retry=1)
        with pytest.raises(c4a.LedgerError) as missing:
            c4a.Ledger(good.replace(f"/{make_url(good).database}", "/no_such_db"))
        assert cli.main(["doctor", "--url", good, "--schema", str(pg_target.schema)]) == 0
        assert cli.main(["doctor", "--url", unreachable]) != 0
        assert cli.main(["show", "nothing", "--url", unreachable]) != 0
    printed = capsys.readouterr()
    assert "***" in printed.out  # doctor shows the URL, masked
    for text in (str(refused.value), str(missing.value), printed.out, printed.err):
        assert_hidden(text)
    assert len(caplog.records) > 10  # it did log: statements, pool events
    assert_hidden("\n".join(r.getMessage() for r in caplog.records))


def test_unencoded_password_is_refused_without_echoing_it(pg_target: Target) -> None:
    base = make_url(pg_target.url)
    raw = f"postgresql+psycopg://someone:{PASSWORD}@{base.host}:{base.port or 5432}/test"
    with pytest.raises(c4a.ConfigurationError, match="percent-encode") as refused:
        c4a.Ledger(raw)
    assert_hidden(str(refused.value))
    assert cli.main(["doctor", "--url", raw]) != 0


# -- the server itself checks the password ----------------------------------------------------


@contextlib.contextmanager
def password_required_for(pg_target: Target, role: str) -> Iterator[None]:
    """A pg_hba.conf line that makes the server check this one role's password (SCRAM)."""
    with admin(pg_target) as conn:
        hba = Path(str(conn.execute("SHOW hba_file").fetchone()[0]))  # type: ignore[index]
    if not os.access(hba, os.W_OK):
        unavailable(f"cannot edit {hba} to make the server check a password (needs its owner)")
    before = hba.read_text()
    line = f"host all {role} 127.0.0.1/32 scram-sha-256  # call4agents test, removed after it\n"
    hba.write_text(line + before)  # first match wins: only this role is affected
    try:
        with admin(pg_target) as conn:
            conn.execute("SELECT pg_reload_conf()")
        _wait_until_checked(pg_target, role)
        yield
    finally:
        hba.write_text(before)
        with admin(pg_target) as conn:
            conn.execute("SELECT pg_reload_conf()")


def test_server_checks_the_awkward_password(pg_target: Target, role: str) -> None:
    with password_required_for(pg_target, role):
        ledger = c4a.Ledger(url_for(pg_target, role), schema=pg_target.schema)
        pg_target.opened.append(ledger)
        assert ledger.effects() == []
        wrong = url_for(pg_target, role).replace(ENCODED, "not-the-password")
        with pytest.raises(c4a.LedgerError, match="password authentication failed") as refused:
            c4a.Ledger(wrong, schema=pg_target.schema)
        assert_hidden(str(refused.value))


def _wait_until_checked(pg_target: Target, role: str) -> None:
    """The reload is asynchronous: wait until a wrong password is turned away."""
    base = make_url(pg_target.url)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            psycopg.connect(
                host=base.host,
                port=base.port or 5432,
                dbname=base.database,
                user=role,
                password="wrong",
                connect_timeout=5,
            ).close()
        except psycopg.OperationalError:
            return
        time.sleep(0.05)
    pytest.fail("the server never started checking the password")
