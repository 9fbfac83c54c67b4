"""libpq's URL forms and a server that is not (yet) there: several hosts in the netloc or the
query with ``target_session_attrs``, a read-only server as the only host, ``init`` waiting out an
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
from call4agents.model.errors import ConfigurationError, LedgerError
from tests.conftest import Target
from tests.postgres.test_tls import _free_port

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
    dead = f"127.0.0.1:{_free_port()}"  # nothing listens there: libpq goes on to the next
    for url in (
        f"postgresql+psycopg://{user}@{dead},{live}/{db}?target_session_attrs=read-write",
        f"postgresql+psycopg://{user}@/{db}?host={dead}&host={live}&target_session_attrs=any",
    ):
        ledger = c4a.Ledger(url, schema=pg_target.schema)
        try:
            _works(ledger)
        finally:
            ledger.close()


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
    relay = _free_port()
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
    url = f"postgresql+psycopg://{user}@127.0.0.1:{_free_port()}/{db}"
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
