"""Turning a ledger URL into a configured SQLAlchemy engine, per dialect."""

from __future__ import annotations

import os
import re
import sqlite3
import time
from pathlib import Path
from typing import Any, Literal

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

from .errors import ConfigurationError, LedgerError

Durability = Literal["power", "process"]
DEFAULT_URL = "sqlite:///.c4a/ledger.db"

# File systems where SQLite's locking and fsync cannot be trusted (SQLite FAQ, "network file
# systems"): two machines may both believe they hold the write lock.
NETWORK_FS = frozenset(
    {
        "nfs",
        "nfs4",
        "cifs",
        "smb3",
        "smbfs",
        "9p",
        "afs",
        "ceph",
        "glusterfs",
        "lustre",
        "fuse.sshfs",
        "sshfs",
        "davfs",
        "fuse.davfs2",
        "fuse.rclone",
        "fuse.s3fs",
        "fuse.gcsfuse",
        "fuse.juicefs",
        "virtiofs",
    }
)
_SCHEMA_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")


def parse_url(url: str | None) -> URL:
    raw = url or os.environ.get("CALL4AGENTS_URL") or DEFAULT_URL
    if "://" not in raw:  # a bare path means an SQLite file
        raw = "sqlite:///" + raw
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
    return parsed


def safe_url(url: str | URL) -> str:
    """The URL with its password masked, for messages and `doctor`."""
    if isinstance(url, URL):
        return url.render_as_string(hide_password=True)
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return re.sub(r"//[^@/]*@", "//***@", url)


def mount_fs_type(path: Path, mounts_text: str | None = None) -> str | None:
    """The file system type of the mount that holds ``path`` (Linux /proc/mounts), if known."""
    if mounts_text is None:
        try:
            mounts_text = Path("/proc/mounts").read_text(encoding="utf-8")
        except OSError:
            return None
    best, fstype = "", None
    target = str(path.resolve())
    for line in mounts_text.splitlines():
        parts = line.split()
        if len(parts) < 3:
            continue
        point = parts[1].replace("\\040", " ")
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):
            best, fstype = point, parts[2]
    return fstype


def check_local_fs(directory: Path, *, allow_network_fs: bool) -> None:
    fstype = mount_fs_type(directory)
    if fstype in NETWORK_FS and not allow_network_fs:
        raise LedgerError(
            f"the ledger folder {directory} is on a network file system ({fstype}), where SQLite "
            "cannot lock reliably and two machines could run one action twice. Use PostgreSQL "
            "(postgresql+psycopg://...) to share a ledger, or pass allow_network_fs=True (or set "
            "CALL4AGENTS_ALLOW_NETWORK_FS=1) if only one machine ever opens it."
        )


def _prepare_sqlite_file(path: Path, *, allow_network_fs: bool) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    check_local_fs(path.parent, allow_network_fs=allow_network_fs)
    # Create it owner-only before SQLite does; SQLite gives -wal and -shm the same mode.
    try:
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
    except OSError as exc:
        raise LedgerError(f"cannot create the ledger file {path}: {exc.strerror}") from exc


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
    synchronous = "FULL" if durability == "power" else "NORMAL"
    engine = create_engine(
        url.set(database=str(path)),
        connect_args={
            "timeout": busy_timeout,
            "isolation_level": None,
            "check_same_thread": False,
        },
    )

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: sqlite3.Connection, _record: Any) -> None:
        _set_wal(dbapi_conn, busy_timeout)
        dbapi_conn.execute(f"PRAGMA synchronous={synchronous}")
        dbapi_conn.execute(f"PRAGMA busy_timeout={int(busy_timeout * 1000)}")

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        # Take the write lock up front: a deferred transaction that reads then writes can fail
        # with SQLITE_BUSY without waiting, where an immediate one waits its turn.
        conn.exec_driver_sql("BEGIN IMMEDIATE")

    return engine


def _set_wal(dbapi_conn: sqlite3.Connection, busy_timeout: float) -> None:
    # Switching a brand-new file to WAL needs a moment of exclusive access; processes opening it
    # together may see "database is locked" here before the busy handler applies, so retry.
    deadline = time.monotonic() + busy_timeout
    while True:
        try:
            dbapi_conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def postgres_engine(url: URL, *, durability: Durability, schema: str | None) -> Engine:
    try:
        import psycopg  # noqa: F401
    except ImportError as exc:
        raise ConfigurationError(
            'a PostgreSQL ledger needs psycopg: pip install "call4agents[postgres]"'
        ) from exc
    if schema is not None and not _SCHEMA_NAME.fullmatch(schema):
        raise ConfigurationError(
            f"schema name {schema!r} is not a plain identifier: use letters, digits and _"
        )
    options = [] if durability == "power" else ["-c synchronous_commit=off"]
    engine = create_engine(
        url,
        pool_size=8,
        max_overflow=8,
        pool_pre_ping=True,
        connect_args={"options": " ".join(options)} if options else {},
        execution_options={"schema_translate_map": {None: schema}} if schema else {},
    )
    return engine


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
