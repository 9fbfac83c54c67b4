"""What ``call4agents doctor`` asks of the database itself: the facts, not the verdicts."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from sqlalchemy import Engine, text

from . import _pg, migrations, stat_rows
from .store import clock

SYNCHRONOUS = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}


@dataclass(frozen=True)
class Facts:
    version: int  # the schema version (0: no ledger tables)
    clock: float  # the database clock, seconds since the epoch
    journal: str | None  # SQLite's journal mode
    tls: tuple[bool, str | None] | None  # PostgreSQL: whether this connection is encrypted, how


def facts(engine: Engine, schema: str | None) -> Facts:
    """One connection's worth: schema version, clock, journal mode or TLS."""
    sqlite = engine.dialect.name == "sqlite"
    with engine.connect() as conn:
        version = migrations.current_version(conn, schema)
        now = clock(conn)
        journal = None if not sqlite else str(conn.exec_driver_sql("PRAGMA journal_mode").scalar())
        tls = None
        if not sqlite:
            row = conn.execute(
                text("SELECT ssl, version FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
            ).one_or_none()
            tls = (bool(row[0]), row[1]) if row is not None else (False, None)
    return Facts(version, now, journal, tls)


def integrity(engine: Engine, *, quick: bool) -> tuple[str, list[str]]:
    """SQLite's own check of the file: the pragma run, and its first findings (``["ok"]``)."""
    pragma = "quick_check" if quick else "integrity_check"
    with engine.connect() as conn:
        return pragma, [
            str(row[0]) for row in conn.exec_driver_sql(f"PRAGMA {pragma}").fetchmany(5)
        ]


def durability(engine: Engine) -> dict[str, str]:
    """SQLite: this connection's ``synchronous``; PostgreSQL: ``fsync``, ``synchronous_commit``."""
    with engine.connect() as conn:
        if engine.dialect.name == "sqlite":
            level = int(conn.exec_driver_sql("PRAGMA synchronous").scalar() or 0)
            return {"synchronous": SYNCHRONOUS.get(level, str(level))}
        return {
            "fsync": str(conn.execute(text("SHOW fsync")).scalar()),
            "synchronous_commit": str(conn.execute(text("SHOW synchronous_commit")).scalar()),
        }


def open_actions(engine: Engine) -> dict[str, int]:
    """How many actions are started and in doubt (through the partial index of open ones)."""
    with engine.connect() as conn:
        return Counter(state for _, state in stat_rows.open_actions(conn))


@dataclass(frozen=True)
class Bouncer:
    """A PgBouncer found at the ledger's address: its version and the pool mode of the ledger's
    database, each None where its console would not say (only its admin and stats users may
    read it)."""

    version: str | None
    mode: str | None


def pgbouncer(engine: Engine) -> Bouncer | None:
    """PgBouncer, if it is what answers at the ledger's host and port: asked for its console
    (the database named ``pgbouncer``), which PostgreSQL does not have. None where a PostgreSQL
    server answers, or nothing does."""
    import psycopg

    target = _pg.target_of(engine)
    if target is None:
        return None
    kwargs = {
        **target.connect_kwargs,
        "dbname": "pgbouncer",  # the console knows no prepared statements or startup options
        "connect_timeout": "5",
        "prepare_threshold": None,
    }
    kwargs.pop("options", None)
    database = target.connect_kwargs.get("dbname")
    try:
        conn = psycopg.connect(**kwargs, autocommit=True)
    except psycopg.Error as exc:
        # PgBouncer refuses its console to other users with "not allowed"; PostgreSQL says the
        # database does not exist.
        return Bouncer(None, None) if "not allowed" in str(exc) else None
    with conn:
        try:
            cur = conn.execute("SHOW VERSION")
            version = str(cur.fetchone()[0])  # type: ignore[index]
            cur = conn.execute("SHOW DATABASES")
            names = [c.name for c in cur.description or ()]
            rows = [dict(zip(names, row, strict=True)) for row in cur.fetchall()]
            modes = [r.get("pool_mode") for r in rows if r.get("name") == database]
            if not modes or not modes[0]:  # the database takes the [pgbouncer] section's mode
                cur = conn.execute("SHOW CONFIG")
                modes = [row[1] for row in cur.fetchall() if row[0] == "pool_mode"]
        except psycopg.Error:
            return Bouncer(None, None)
    return Bouncer(version, str(modes[0]) if modes and modes[0] else None)


@dataclass(frozen=True)
class Replication:
    """What a PostgreSQL server says of its standbys: the settings that decide whether a commit
    waits for one, and each connected standby's ``sync_state`` (None where this user may not
    read it: that needs ``pg_monitor``)."""

    standby: bool  # this server is itself a standby (in recovery)
    synchronous_standby_names: str
    synchronous_commit: str
    standbys: list[tuple[str, str | None]]  # (application_name, sync_state)


def replication(engine: Engine) -> Replication:
    with engine.connect() as conn:
        standby = bool(conn.execute(text("SELECT pg_is_in_recovery()")).scalar())
        names = str(conn.execute(text("SHOW synchronous_standby_names")).scalar() or "")
        commit = str(conn.execute(text("SHOW synchronous_commit")).scalar())
        rows = conn.execute(
            text("SELECT application_name, sync_state FROM pg_stat_replication")
        ).all()
    return Replication(standby, names, commit, [(str(a), s) for a, s in rows])
