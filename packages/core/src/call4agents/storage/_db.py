"""Turning a ledger URL into a configured SQLAlchemy engine, per dialect."""

from __future__ import annotations

import re
import select
import sqlite3
import time
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, InvalidatePoolError, SQLAlchemyError

from call4agents.model.errors import ConfigurationError

from . import _files, _forkgate, _pg, _pgconn, _sqlite
from ._sqlite import DEFAULT_URL, NETWORK_FS, Durability, check_local_fs, mount_fs_type

# What a parsed host may look like: names or IPv4 addresses (a comma-separated list for libpq's
# several hosts), or empty (a socket given in ?host=). Anything else means the URL was split in
# the wrong place, nearly always at an "@" of a password that was not percent-encoded; the pieces
# of that password would then show in every message.
_HOST = re.compile(r"[A-Za-z0-9._~%,-]*")
_QUERY_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Marks a pooled SQLite connection whose write transaction a fork waits for (``_forkgate``).
_WRITER = "c4a_writer"
_OPTIMIZED = "c4a_optimized"  # when `PRAGMA optimize` last ran on the connection (monotonic)
_ENCODE_HINT = (
    "if the password holds characters such as @ : / ? # [ ] %, percent-encode it "
    "(Python: urllib.parse.quote(password, safe=''))"
)


def parse_url(url: str | None) -> URL:
    raw = _sqlite.given_url(url)
    try:
        parsed = make_url(raw)
    except ArgumentError as exc:
        raise ConfigurationError(
            f"cannot read the ledger URL {safe_url(raw)!r}: use sqlite:///path/to/ledger.db or "
            "postgresql+psycopg://user:password@host/db"
        ) from exc
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    if parsed.drivername not in ("sqlite", "sqlite+pysqlite", "postgresql+psycopg"):
        raise ConfigurationError(
            f"unsupported ledger URL scheme {parsed.drivername!r}: use sqlite:///path/to/ledger.db "
            "or postgresql+psycopg://user:password@host/db"
        )
    if parsed.drivername == "postgresql+psycopg":
        _check_split(parsed)
    return parsed


def _check_split(url: URL) -> None:
    """Refuse a PostgreSQL URL that was cut apart inside its password, without echoing it."""
    host_ok = url.host is None or bool(_HOST.fullmatch(url.host)) or ":" in url.host  # IPv6
    odd_key = any(not _QUERY_KEY.fullmatch(k) for k in url.query)
    if not host_ok or odd_key or "@" in (url.database or ""):
        raise ConfigurationError(
            "cannot read the PostgreSQL ledger URL: it does not split into user, password, host "
            f"and database as expected; {_ENCODE_HINT}. (The URL is not shown, as it may hold "
            "the password.)"
        )


def safe_url(url: str | URL) -> str:
    """The URL with its password masked, for messages and `doctor`."""
    if isinstance(url, URL):
        return url.render_as_string(hide_password=True)
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        # Up to the last "@": an unencoded password may itself hold "@" or "/".
        return re.sub(r"//.*@", "//***@", url)


def _prepare_sqlite_file(path: Path, *, allow_network_fs: bool) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    check_local_fs(path.parent, allow_network_fs=allow_network_fs)
    # Made owner-only before SQLite opens it (SQLite gives -wal and -shm the same mode), and never
    # through a descriptor of the database itself: closing one would drop the locks this
    # process's open connections hold on it (see _files).
    _files.create_private(path)
    _files.check_ledger_files(path)


def sqlite_engine(
    url: URL, *, durability: Durability, busy_timeout: float, allow_network_fs: bool
) -> Engine:
    database = url.database or ""
    if database in ("", ":memory:"):
        raise ConfigurationError(
            "an in-memory SQLite ledger forgets everything when the process ends, which defeats "
            "once-only actions; give a file path (sqlite:///.c4a/ledger.db)"
        )
    path = Path(database).expanduser()
    _prepare_sqlite_file(path, allow_network_fs=allow_network_fs)
    engine = create_engine(
        url.set(database=str(path)), connect_args=_sqlite.connect_args(busy_timeout)
    )

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: sqlite3.Connection, record: Any) -> None:
        _sqlite.configure(dbapi_conn, durability=durability, busy_timeout=busy_timeout)
        with _forkgate.WRITES:  # it may write statistics
            _sqlite.optimize(dbapi_conn, opening=True)
        # The first return to the pool optimizes again, with the tables just used in mind (all
        # SQLite before 3.46 looks at), then every OPTIMIZE_EVERY seconds.
        record.info[_OPTIMIZED] = time.monotonic() - _sqlite.OPTIMIZE_EVERY

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        # Take the write lock up front: a deferred transaction that reads then writes can fail
        # with SQLITE_BUSY without waiting, where an immediate one waits its turn. Pure reads
        # stay deferred, so WAL lets them run beside a writer.
        reading = conn.get_execution_options().get("c4a_read", False)
        if not reading and _WRITER not in conn.connection.info:
            conn.connection.info[_WRITER] = _forkgate.WRITES.enter()
        conn.exec_driver_sql("BEGIN" if reading else "BEGIN IMMEDIATE")

    @event.listens_for(engine, "checkin")
    def _on_checkin(_dbapi_conn: Any, record: Any) -> None:
        # Back in the pool, its transaction has ended: a fork need not wait for it.
        token = record.info.pop(_WRITER, None)
        if token is not None:
            _forkgate.WRITES.leave(token)
        now = time.monotonic()
        if now - record.info.get(_OPTIMIZED, now) >= _sqlite.OPTIMIZE_EVERY:
            record.info[_OPTIMIZED] = now
            with _forkgate.WRITES:
                _sqlite.optimize(_dbapi_conn)

    @event.listens_for(engine, "close")
    def _on_close(dbapi_conn: sqlite3.Connection, _record: Any) -> None:
        # SQLite's advice for every connection: optimize before closing it, when this process
        # knows which tables it used (a command's run ends here).
        with _forkgate.WRITES:
            _sqlite.optimize(dbapi_conn)

    return engine


def postgres_engine(url: URL, *, durability: Durability, schema: str | None) -> Engine:
    try:
        import psycopg  # noqa: F401
    except ImportError as exc:
        raise ConfigurationError(
            'a PostgreSQL ledger needs psycopg: pip install "call4agents-core[postgres]"'
        ) from exc
    if schema is not None and not _pgconn.SCHEMA_NAME.fullmatch(schema):
        raise ConfigurationError(
            f"schema name {schema!r} is not a plain identifier: use letters, digits and _"
        )
    engine = create_engine(
        url,
        pool_size=8,
        max_overflow=8,
        connect_args=pg_connect_args(url, durability),
        execution_options={"schema_translate_map": {None: schema}} if schema else {},
    )
    # Instead of pool_pre_ping, which costs a round trip on every checkout: a connection the
    # server dropped (restart, failover, idle timeout) has its goodbye or EOF waiting on the
    # socket, so only a connection with unread input is pinged; a dead one makes the pool drop
    # every connection older than now and open a fresh one for this checkout.
    event.listen(engine, "checkout", _check_alive)
    event.listen(engine, "connect", _no_jit)
    _, params = engine.dialect.create_connect_args(engine.url)
    params.pop("context", None)  # SQLAlchemy's type adapters: the listener needs none
    _pg.register(engine, {**params, **pg_connect_args(url, durability)}, schema)
    return engine


def pg_connect_args(url: URL, durability: Durability) -> dict[str, str]:
    """libpq settings for every connection of this ledger; the URL's own settings win."""
    return _pgconn.connect_args(url.query, durability)


def _no_jit(dbapi_conn: Any, _record: Any) -> None:
    _pgconn.no_jit(dbapi_conn)  # the lean route sets its sessions up the same way


def _check_alive(dbapi_conn: Any, _record: Any, _proxy: Any) -> None:
    if getattr(dbapi_conn, "closed", False) or getattr(dbapi_conn, "broken", False):
        raise InvalidatePoolError("the connection was closed")
    pgconn = getattr(dbapi_conn, "pgconn", None)
    if pgconn is None:
        return
    try:
        if not has_input(pgconn.socket):  # .socket raises once libpq knows it is broken
            return
        with dbapi_conn.cursor() as cursor:
            cursor.execute("SELECT 1")
        dbapi_conn.rollback()
    except Exception as exc:
        raise InvalidatePoolError(f"the server closed the connection: {exc}") from exc


def has_input(fd: int) -> bool:
    """True if the socket has something to read (or is at EOF); never blocks."""
    try:
        poller = socket_poll(fd)
        if poller is not None:
            return bool(poller.poll(0))
        return bool(select.select([fd], [], [], 0)[0])
    except (OSError, ValueError):
        return True  # cannot tell: let the ping decide


def socket_poll(fd: int) -> Any:
    """A poll object on ``fd`` for ``has_input``'s question, to ask again and again with
    ``.poll(0)``; None where ``select.poll`` does not exist (ask ``has_input`` instead)."""
    if not hasattr(select, "poll"):
        return None
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLERR | select.POLLHUP)
    return poller


def make_engine(
    url: URL,
    *,
    durability: Durability,
    schema: str | None,
    busy_timeout: float,
    allow_network_fs: bool,
) -> Engine:
    if durability not in ("power", "process"):
        raise ConfigurationError(
            f"durability={durability!r} is not known: use 'power' (survives power loss, the "
            "default) or 'process' (survives a crash of the process, faster)"
        )
    if url.get_backend_name() == "sqlite":
        if schema is not None:
            raise ConfigurationError("schema= applies to PostgreSQL ledgers only")
        return sqlite_engine(
            url,
            durability=durability,
            busy_timeout=busy_timeout,
            allow_network_fs=allow_network_fs,
        )
    return postgres_engine(url, durability=durability, schema=schema)


# The handles and the fault type the layers above name (only storage imports SQLAlchemy): an
# engine, a parsed URL, and what a database call raises when the database fails.
__all__ = [
    "DEFAULT_URL",
    "NETWORK_FS",
    "URL",
    "DatabaseFault",
    "Durability",
    "Engine",
    "check_local_fs",
    "mount_fs_type",
]
DatabaseFault = SQLAlchemyError
