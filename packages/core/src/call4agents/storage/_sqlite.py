"""An SQLite ledger's file and connection settings, stated once for both of its routes.

SQLAlchemy's engine (``_db.sqlite_engine``) and the lean route of ``call4agents doubt``
(``_lean``, which opens the file with ``sqlite3`` alone) both take from here the checks made
before the file is opened, the connection's arguments, its PRAGMAs and the database clock, so a
connection opened either way waits for a writer as long and commits as durably. Nothing here
imports SQLAlchemy: importing it costs a short command most of its start-up.
"""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path
from typing import Any, Literal

from call4agents.model.errors import LedgerError

Durability = Literal["power", "process"]
DEFAULT_URL = "sqlite:///.c4a/ledger.db"
# Seconds a connection waits for another's write lock before it fails (Ledger's default).
BUSY_TIMEOUT = 30.0
# The database's clock in epoch seconds, as SQL: julianday('now') is the same clock for every
# process of this machine, at millisecond grain.
NOW = "((julianday('now') - 2440587.5) * 86400.0)"

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


def given_url(url: str | None) -> str:
    """The ledger URL to open: ``url``, else ``$CALL4AGENTS_URL``, else the default; a bare path
    means an SQLite file."""
    raw = url or os.environ.get("CALL4AGENTS_URL") or DEFAULT_URL
    return raw if "://" in raw else "sqlite:///" + raw


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


def connect_args(busy_timeout: float) -> dict[str, Any]:
    """``sqlite3.connect``'s arguments: autocommit (each route says BEGIN itself), and the
    driver's own wait for a lock."""
    return {"timeout": busy_timeout, "isolation_level": None, "check_same_thread": False}


def configure(conn: sqlite3.Connection, *, durability: Durability, busy_timeout: float) -> None:
    """What every new connection of a ledger runs first: WAL, the fsync level, the busy wait."""
    _set_wal(conn, busy_timeout)
    synchronous = "FULL" if durability == "power" else "NORMAL"
    conn.execute(f"PRAGMA synchronous={synchronous}")
    conn.execute(f"PRAGMA busy_timeout={int(busy_timeout * 1000)}")


# Rows ANALYZE samples per index when `PRAGMA optimize` runs it (SQLite's advice: 100 to 1000):
# a few milliseconds however large the ledger, where a full ANALYZE reads every row.
ANALYSIS_LIMIT = 400
# Seconds between two `PRAGMA optimize` on one connection, at its return to the pool: cheap (it
# re-analyzes only what changed a lot) yet often enough for a console that runs for months.
OPTIMIZE_EVERY = 600.0


def optimize(conn: sqlite3.Connection, *, opening: bool = False) -> None:
    """Keep the planner's statistics current, as SQLite advises: ``PRAGMA optimize=0x10002`` as a
    connection opens (SQLite 3.46 and later check every table; before, this does nothing), and
    ``PRAGMA optimize`` now and then on a long-lived one (it analyzes the tables used on that
    connection that were never analyzed or grew 25-fold). Without statistics SQLite may pick an
    index that reads far more rows: a ledger nobody ever analyzed once took seconds per console
    page. A ledger this user may only read, or one busy with a writer past the busy timeout,
    keeps its statistics until the next turn."""
    try:
        conn.execute(f"PRAGMA analysis_limit={ANALYSIS_LIMIT}")
        try:
            conn.execute("PRAGMA optimize=0x10002" if opening else "PRAGMA optimize").fetchall()
        finally:
            conn.execute("PRAGMA analysis_limit=0")  # an ANALYZE someone asks for reads all
    except sqlite3.Error:
        return


def _set_wal(conn: sqlite3.Connection, busy_timeout: float) -> None:
    # Switching a brand-new file to WAL needs a moment of exclusive access; processes opening it
    # together may see "database is locked" here before the busy handler applies, so retry.
    deadline = time.monotonic() + busy_timeout
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.01)
