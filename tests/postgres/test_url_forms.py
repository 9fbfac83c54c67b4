"""libpq's URL forms and a server that is not (yet) there: several hosts in the netloc or the
query with ``target_session_attrs``, IPv6 addresses among them (against a server of this module's
own that listens on ::1 only), a read-only server as the only host, ``init`` waiting out an
outage for a bounded time, and the driver's settings or the user's own engine."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

import call4agents as c4a
from call4agents.facade import cli
from call4agents.model.errors import ConfigurationError, LedgerError
from tests.conftest import Target
from tests.postgres.helpers import free_port, throwaway_server, unavailable

READ_ONLY = "options=-c%20default_transaction_read_only%3Don"  # a replica, as far as writes go


def _parts(target: Target) -> tuple[str, str, str]:
    """The user part, ``host:port`` and database of the test server's URL."""
    url = make_url(target.url)
    user = url.username or ""
    if url.password:
        user += ":" + url.password
    return user, f"{url.host}:{url.port or 5432}", url.database or ""


def _works(ledger: c4a.Ledger) -> None:
    send = c4a.effect(name="send", ledger=ledger)(lambda to: f"sent {to}")
    with c4a.run("forms"):
        assert [send("a"), send("a")] == ["sent a", "sent a"]


def test_several_hosts_in_the_netloc_and_in_the_query(pg_target: Target) -> None:
    user, live, db = _parts(pg_target)
    dead = f"127.0.0.1:{free_port()}"  # nothing listens there: libpq goes on to the next
    for url in (
        f"postgresql+psycopg://{user}@{dead},{live}/{db}?target_session_attrs=read-write",
        f"postgresql+psycopg://{user}@/{db}?host={dead}&host={live}&target_session_attrs=any",
    ):
        ledger = c4a.Ledger(url, schema=pg_target.schema)
        try:
            _works(ledger)
        finally:
            ledger.close()


@pytest.fixture(scope="module")
def ipv6_port() -> Iterator[int]:
    """The port of a PostgreSQL server of this module's own listening on ::1 and nowhere else
    (the shared test server listens on 127.0.0.1 only): a connection that reaches it went to
    the IPv6 host of its URL."""
    try:
        port = free_port("::1")
    except OSError as exc:
        unavailable(f"this machine has no IPv6 loopback (::1): {exc}")
    with throwaway_server(listen="::1", port=port) as server:
        yield server.port


def test_ipv6_hosts_in_the_netloc_and_in_the_query(
    ipv6_port: int, capsys: pytest.CaptureFixture[str]
) -> None:
    v6, dead = f"[::1]:{ipv6_port}", f"127.0.0.1:{free_port()}"
    query = "target_session_attrs=read-write"
    for url in (
        f"postgresql+psycopg://c4a@{v6}/postgres",
        f"postgresql+psycopg://c4a@{v6},{dead}/postgres?{query}",
        f"postgresql+psycopg://c4a@{dead},{v6}/postgres?{query}",  # libpq goes on to ::1
        f"postgresql+psycopg://c4a@/postgres?host={dead}&host={v6}&{query}",
        f"postgresql+psycopg://c4a@/postgres?host=127.0.0.1,::1&port={free_port()},{ipv6_port}",
    ):
        ledger = c4a.Ledger(url, schema="ipv6")
        try:
            _works(ledger)
            with ledger.engine.connect() as conn:
                assert conn.execute(text("SELECT host(inet_server_addr())")).scalar() == "::1"
        finally:
            ledger.close()
    url = f"postgresql+psycopg://c4a@{v6},{dead}/postgres?{query}"
    assert cli.main(["doctor", "--url", url, "--schema", "ipv6"]) == 0
    out = capsys.readouterr().out
    assert "OK    tls          not encrypted, on this machine" in out  # both hosts are local


@pytest.mark.parametrize(
    ("hosts", "said"),
    [
        ("[::1:5432,127.0.0.1:5432", "'[::1:5432'"),  # the bracket never closed
        ("::1]:5432,127.0.0.1:5432", "'::1]:5432'"),
        ("[::1]5432,127.0.0.1:5432", "'[::1]5432'"),  # no colon before the port
        ("[::1]:5432x", "'[::1]:5432x'"),
        ("[db.example.com]:5432,h2", "'db.example.com' is none"),
    ],
)
def test_brackets_out_of_place_fail_in_one_line(hosts: str, said: str) -> None:
    for url in (
        f"postgresql+psycopg://c4a@{hosts}/db",
        f"postgresql+psycopg://c4a@/db?host={hosts}",
    ):
        with pytest.raises(ConfigurationError) as raised:
            c4a.Ledger(url, open_retry=0)
        message = str(raised.value)
        assert "\n" not in message
        assert said in message
        assert "an IPv6 address in brackets ([::1] or [::1]:5432)" in message  # what works


def test_a_netloc_host_list_out_of_form_fails_in_one_line() -> None:
    # In the netloc an IPv6 address needs its brackets (a port may follow), and no host is empty.
    for hosts, said in (("::1:5432,127.0.0.1:5432", "'::1:5432'"), ("h1,,h2", "''")):
        with pytest.raises(ConfigurationError, match=f"cannot read the host {said}"):
            c4a.Ledger(f"postgresql+psycopg://c4a@{hosts}/db", open_retry=0)


def test_hosts_and_ports_given_twice_fail_in_one_line() -> None:
    for url, said in (
        ("postgresql+psycopg://c4a@h1,h2/db?host=[::1]", r"both before the path and in \?host="),
        ("postgresql+psycopg://c4a@/db?host=[::1]:5432&port=5432", "in one place"),
    ):
        with pytest.raises(ConfigurationError, match=said):
            c4a.Ledger(url, open_retry=0)


def test_a_read_only_server_as_the_only_host_says_so(pg_target: Target) -> None:
    for query in (READ_ONLY, READ_ONLY + "&target_session_attrs=read-write"):
        with pytest.raises(LedgerError) as raised:
            c4a.Ledger(f"{pg_target.url}?{query}", schema=pg_target.schema, open_retry=0)
        message = str(raised.value)
        assert "read-only" in message
        assert "point the URL at the primary or add target_session_attrs=read-write" in message
        assert "\n" not in message


@contextlib.contextmanager
def _forwarder(port: int, to: tuple[str, int]) -> Iterator[None]:
    """A TCP relay from ``port`` to the server: the server 'comes up' at ``port``."""
    listener = socket.create_server(("127.0.0.1", port))
    stop = threading.Event()

    def pipe(a: socket.socket, b: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := a.recv(65536):
                b.sendall(data)
        for s in (a, b):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def serve() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                client, _ = listener.accept()
            except OSError:
                continue
            server = socket.create_connection(to)
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=pipe, args=(a, b), daemon=True).start()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        listener.close()


def test_init_waits_out_an_outage_then_opens(pg_target: Target) -> None:
    user, live, db = _parts(pg_target)
    host, port = live.rsplit(":", 1)
    relay = free_port()
    url = f"postgresql+psycopg://{user}@127.0.0.1:{relay}/{db}"
    opened: list[Any] = []
    worker = threading.Thread(
        target=lambda: opened.append(c4a.Ledger(url, schema=pg_target.schema, open_retry=120))
    )
    worker.start()
    time.sleep(1.0)  # the first attempts find nothing listening
    with _forwarder(relay, (host, int(port))):
        worker.join(180)
        assert opened, "the ledger did not open once the server came up"
        try:
            _works(opened[0])
        finally:
            opened[0].close()


def test_init_gives_up_after_open_retry_with_one_error(pg_target: Target) -> None:
    user, _, db = _parts(pg_target)
    url = f"postgresql+psycopg://{user}@127.0.0.1:{free_port()}/{db}"
    with pytest.raises(LedgerError) as raised:
        c4a.Ledger(url, open_retry=0.5)
    message = str(raised.value)
    assert "no PostgreSQL server answered" in message
    assert "within 0.5 s" in message
    assert "\n" not in message
    with pytest.raises(ConfigurationError, match="open_retry"):
        c4a.Ledger(url, open_retry=-1)


def test_the_drivers_settings_and_a_users_engine(pg_target: Target, tmp_path: Any) -> None:
    ledger = c4a.Ledger(
        pg_target.url, schema=pg_target.schema, connect_args={"application_name": "billing"}
    )
    try:
        with ledger.engine.connect() as conn:
            assert conn.execute(text("SHOW application_name")).scalar() == "billing"
        _works(ledger)
    finally:
        ledger.close()
    engine = create_engine(pg_target.url, pool_size=2)
    ledger = c4a.Ledger(engine=engine, schema=pg_target.schema)
    try:
        _works(ledger)
        assert ledger.engine.pool is engine.pool  # the user's pool, not a second one
    finally:
        ledger.close()
    with pytest.raises(ConfigurationError, match="PostgreSQL"):
        c4a.Ledger(engine=create_engine(f"sqlite:///{tmp_path / 'x.db'}"))
