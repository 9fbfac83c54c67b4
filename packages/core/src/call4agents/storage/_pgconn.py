"""What a PostgreSQL connection of a ledger is, stated once without SQLAlchemy: the libpq
settings every connection gets, the session set-up, the database clock, the schema names allowed,
and the names of the waiters' locks and channel.

The engine (``_db``, ``_pg``, ``_hot``) and the lean route of ``call4agents doubt``
(``_lean_pg``) both take them from here, so the two open and judge alike; importing this module
imports no SQLAlchemy, which the lean route must not load.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Mapping, Sequence
from typing import Any

from ._sqlite import Durability

# What a ``schema=`` may be: a plain identifier, so that it can be written into statements.
SCHEMA_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")
# libpq settings a shared ledger wants unless the URL says otherwise: a server that does not
# answer fails a call within seconds instead of hanging it, and a silently dropped connection
# (NAT, failover) is noticed by TCP keepalives rather than after the kernel's two hours.
CONNECT_DEFAULTS = {
    "connect_timeout": "10",
    "keepalives_idle": "30",
    "keepalives_interval": "10",
    "keepalives_count": "3",
    # A statement sent into a dead network (no reset ever comes) fails after 30 s instead of the
    # kernel's ~15 minutes of retransmissions, so a result write's bounded retry stays bounded.
    "tcp_user_timeout": "30000",
    "application_name": "call4agents",
}
# The database clock in epoch seconds (``dialects.PostgreSQL.now``, written out).
NOW = "extract(epoch from clock_timestamp())::float8"
# Names "Call4Agents waiters" among advisory locks (the migration lock is the one-bigint form of
# 0x0C4A0001, a separate key space).
LOCK_CLASS = 0x0C4A0002


def connect_args(
    query: Mapping[str, str | Sequence[str]], durability: Durability
) -> dict[str, str]:
    """libpq settings for every connection of a ledger whose URL carries ``query``; the URL's own
    settings win."""
    args = {k: v for k, v in CONNECT_DEFAULTS.items() if k not in query}
    if durability == "process":
        given = query.get("options", "")
        given = given if isinstance(given, str) else " ".join(given)
        args["options"] = (given + " -c synchronous_commit=off").strip()
    return args


def no_jit(dbapi_conn: Any) -> None:
    """Turn off the server's JIT compiler for this session. The ledger's statements are short
    index reads, but one that checks each of thousands of tickets is estimated above
    ``jit_above_cost``, and compiling it (~30 ms) took longer than running it. Set per session
    rather than as a startup option, which connection poolers such as PgBouncer refuse."""
    with dbapi_conn.cursor() as cursor:
        cursor.execute("SET jit = off")
    dbapi_conn.commit()  # a SET inside a transaction rolled back would be undone


def channel_for(schema: str | None) -> str:
    """The NOTIFY channel of one ledger: schemas sharing a database do not wake each other."""
    return ("c4a_" + schema if schema else "c4a_ledger")[:63]


def lock_id(schema: str | None, key: str) -> int:
    """A signed 32-bit id for the key's advisory lock."""
    value = zlib.crc32(f"{schema or ''}|{key}".encode())
    return value - (1 << 32) if value >= 1 << 31 else value


def wake_sql(key_sql: str) -> str:
    """A value that NOTIFYs the key ``key_sql`` (SQL) once the transaction commits, only if a
    waiter holds its lock (see ``_pg``); parameters: the lock id, then the channel."""
    return (
        f"CASE WHEN pg_try_advisory_xact_lock({LOCK_CLASS}, %s::int4) THEN 0 "
        f"ELSE (SELECT 1 FROM pg_notify(%s, {key_sql})) END"
    )
