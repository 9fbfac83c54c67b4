"""A ledger's connections, stated in one place: the settings every connection of an SQLite or a
PostgreSQL ledger gets, and the SQLAlchemy engine that opens them (``urls`` reads the URL).
"""

from __future__ import annotations

import os
import re
import select
import sqlite3
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL
from sqlalchemy.exc import InvalidatePoolError, SQLAlchemyError

from call4agents.model import platform
from call4agents.model.errors import ConfigurationError, LedgerError

from . import _files, _pg, sqlite_tx
from .sqlite_tx import WRITES

Durability = Literal["power", "process"]

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


def configure_sqlite(
    conn: sqlite3.Connection, *, durability: Durability, busy_timeout: float
) -> None:
    """What every new connection of a ledger runs first: WAL, the fsync level, the busy wait."""
    _set_wal(conn, busy_timeout)
    synchronous = "FULL" if durability == "power" else "NORMAL"
    conn.execute(f"PRAGMA synchronous={synchronous}")
    if durability == "power" and platform.full_fsync():
        # macOS: fsync leaves the commit in the drive's cache, which a power cut loses; SQLite
        # asks for F_FULLFSYNC on commits and on checkpoints with these (no-ops elsewhere).
        conn.execute("PRAGMA fullfsync=ON")
        conn.execute("PRAGMA checkpoint_fullfsync=ON")
    conn.execute(f"PRAGMA busy_timeout={int(busy_timeout * 1000)}")


# Rows ANALYZE samples per index when `PRAGMA optimize` runs it (SQLite's advice: 100 to 1000):
# a few milliseconds however large the ledger, where a full ANALYZE reads every row.
ANALYSIS_LIMIT = 400
# Seconds between two `PRAGMA optimize` on one connection, at its return to the pool: cheap (it
# re-analyzes only what changed a lot) yet often enough for a console that runs for months.
OPTIMIZE_EVERY = 600.0


def optimize_sqlite(conn: sqlite3.Connection, *, opening: bool = False) -> None:
    """Keep the planner's statistics current, as SQLite advises: ``PRAGMA optimize=0x10002`` as a
    connection opens (SQLite 3.46 and later check every table; before, ``_analyze_new_tables``
    does what it would), and ``PRAGMA optimize`` now and then on a long-lived one (it analyzes
    the tables used on that connection that were never analyzed or grew 25-fold). Without
    statistics SQLite may pick an index that reads far more rows: a ledger nobody ever analyzed
    once took seconds per console page. A ledger this user may only read, or one busy with a
    writer past the busy timeout, keeps its statistics until the next turn."""
    try:
        conn.execute(f"PRAGMA analysis_limit={ANALYSIS_LIMIT}")
        try:
            if opening and not CHECKS_EVERY_TABLE:
                _analyze_new_tables(conn)
            else:
                conn.execute("PRAGMA optimize=0x10002" if opening else "PRAGMA optimize").fetchall()
        finally:
            conn.execute("PRAGMA analysis_limit=0")  # an ANALYZE someone asks for reads all
    except sqlite3.Error:
        return


# SQLite 3.46 taught `PRAGMA optimize` to look at every table as a connection opens (0x10000).
# Before it, a connection analyzes only the tables it used, at its next optimize: a console on a
# ledger never analyzed served its pages without statistics for ten minutes, /health reading a
# window's runs through the wrong index.
CHECKS_EVERY_TABLE = sqlite3.sqlite_version_info >= (3, 46)


def _analyze_new_tables(conn: sqlite3.Connection) -> None:
    """As a connection opens on an older SQLite: each table that holds rows and was never
    analyzed is (sampled, so a few milliseconds at any size); once done, nothing is written."""
    tables = "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
    known = "SELECT 1 FROM sqlite_master WHERE name = 'sqlite_stat1'"
    analyzed = set()
    if conn.execute(known).fetchone() is not None:
        analyzed = {name for (name,) in conn.execute("SELECT DISTINCT tbl FROM sqlite_stat1")}
    for (table,) in conn.execute(tables).fetchall():
        quoted = '"' + table.replace('"', '""') + '"'
        if table not in analyzed and conn.execute(f"SELECT 1 FROM {quoted} LIMIT 1").fetchone():
            conn.execute(f"ANALYZE {quoted}")


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


_OPTIMIZED = "c4a_optimized"  # when `PRAGMA optimize` last ran on the connection (monotonic)
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


# The URL's own settings, read by the ledger and never passed to libpq: which pooler stands
# between the ledger and the server ("transaction", "session", or "none" for a direct line).
POOLER_SETTING = "c4a_pooler"
POOLERS = ("transaction", "session", "none")
# psycopg's, not libpq's: read here, as the URL gives it as text and psycopg wants a number.
PREPARE_SETTING = "prepare_threshold"
# What a pooled ledger sets for each transaction instead of as a startup option, which poolers
# refuse: it lasts until the transaction ends, so it never outlives it on a shared connection.
SYNC_OFF = "set_config('synchronous_commit', 'off', true)"


STATEMENT_MODE = (
    "a pooler in statement mode cannot carry the ledger: a claim is a transaction of several "
    "statements; use pool_mode=transaction (or session) for the ledger's database"
)


def pooler_of(url: URL, given: str | None) -> str | None:
    """The pooler in front of the server: ``given`` (``init(pooler=...)``), else the URL's
    ``c4a_pooler``; None for a direct connection. A pooler in statement mode is refused: a claim
    is a transaction of several statements, which such a pooler would split across servers."""
    found = given if given is not None else url.query.get(POOLER_SETTING)
    if isinstance(found, tuple):
        raise ConfigurationError(f"{POOLER_SETTING} is given twice in the ledger URL: give it once")
    if found == "statement":
        raise ConfigurationError(STATEMENT_MODE)
    if found is not None and found not in POOLERS:
        raise ConfigurationError(
            f"pooler={found!r} is not known: use 'transaction' (PgBouncer pool_mode=transaction, "
            "Supabase's and Neon's pooled endpoints, RDS Proxy), 'session' or 'none'"
        )
    return None if found in (None, "none") else found


def statement_mode_refusal(exc: BaseException) -> ConfigurationError | None:
    """PgBouncer's refusal of a transaction in statement mode, as the one-line error to show."""
    return ConfigurationError(STATEMENT_MODE) if "statement pooling" in str(exc) else None


def _prepare_threshold(url: URL, pooler: str | None) -> dict[str, int | None]:
    """psycopg's ``prepare_threshold``: the URL's, as a number (or ``none``); else none at all
    behind a transaction pooler, whose next transaction may run on another server connection
    than the one that prepared a statement; else psycopg's default."""
    given = url.query.get(PREPARE_SETTING)
    if given is None:
        return {"prepare_threshold": None} if pooler == "transaction" else {}
    if isinstance(given, str) and given.lower() in ("", "none"):
        return {"prepare_threshold": None}
    try:
        return {"prepare_threshold": int(given)}  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ConfigurationError(
            f"{PREPARE_SETTING}={given!r} in the ledger URL is not a whole number: give a count "
            "of uses before psycopg prepares a statement, or none to prepare nothing"
        ) from None


def pg_connect_args(url: URL, durability: Durability, pooler: str | None = None) -> dict[str, str]:
    """libpq settings for every connection of this ledger; the URL's own settings win. Behind a
    pooler there are no startup ``options`` of ours (poolers refuse them):
    ``durability="process"`` is set per transaction instead (``SYNC_OFF``)."""
    query = url.query
    args = {k: v for k, v in CONNECT_DEFAULTS.items() if k not in query}
    if durability == "process" and pooler is None:
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


def _prepare_sqlite_file(path: Path, *, allow_network_fs: bool) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as exc:
        raise _unwritable(path, exc) from None
    check_local_fs(path.parent, allow_network_fs=allow_network_fs)
    # Made owner-only before SQLite opens it (SQLite gives -wal and -shm the same mode), and never
    # through a descriptor of the database itself: closing one would drop the locks this
    # process's open connections hold on it (see _files).
    try:
        _files.create_private(path)
    except LedgerError as exc:
        if isinstance(exc.__cause__, PermissionError):
            raise _unwritable(path, exc.__cause__) from None
        raise
    _files.check_ledger_files(path)


def _unwritable(path: Path, exc: OSError) -> LedgerError:
    """The folder that refused the ledger (the nearest one that exists), and the ways round it."""
    folder = path.parent.resolve()
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    return LedgerError(
        f"cannot create the ledger {path}: {exc.strerror} in {folder}. Run from a folder you may "
        'write to, or give the ledger a path there: c4a.init("sqlite:////path/to/ledger.db"), '
        "--url, or $CALL4AGENTS_URL"
    )


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
    # Autocommit (the engine says BEGIN itself, see below), and the driver's own wait for a lock.
    options = {"timeout": busy_timeout, "isolation_level": None, "check_same_thread": False}
    engine = create_engine(url.set(database=str(path)), connect_args=options)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: sqlite3.Connection, record: Any) -> None:
        configure_sqlite(dbapi_conn, durability=durability, busy_timeout=busy_timeout)
        with WRITES:  # it may write statistics
            optimize_sqlite(dbapi_conn, opening=True)
        # The first return to the pool optimizes again, with the tables just used in mind (all
        # SQLite before 3.46 looks at), then every OPTIMIZE_EVERY seconds.
        record.info[_OPTIMIZED] = time.monotonic() - OPTIMIZE_EVERY

    # A transaction begins and ends through the dialect's own steps: SQLAlchemy wraps what they
    # raise (a lock waited for too long) as it wraps a statement's faults, listeners still get
    # its ``begin``, ``commit`` and ``rollback`` events, and the engine carries no connection
    # events of the ledger's own, so that SQLAlchemy skips its event dispatch on every
    # statement while nobody listens.
    dialect: Any = engine.dialect
    dialect.do_begin = sqlite_tx.begin
    dialect.do_commit, dialect.do_rollback = sqlite_tx.commit, sqlite_tx.rollback

    @event.listens_for(engine, "checkin")
    def _on_checkin(_dbapi_conn: Any, record: Any) -> None:
        # Back in the pool: its transaction has ended (if no commit or rollback said so, it was
        # closed or invalidated in the middle of one), and whoever reads on it is done.
        sqlite_tx.ended(record)
        record.info.pop(sqlite_tx.READS, None)
        now = time.monotonic()
        if now - record.info.get(_OPTIMIZED, now) >= OPTIMIZE_EVERY:
            record.info[_OPTIMIZED] = now
            with WRITES:
                optimize_sqlite(_dbapi_conn)

    @event.listens_for(engine, "close")
    def _on_close(dbapi_conn: sqlite3.Connection, _record: Any) -> None:
        # SQLite's advice for every connection: optimize before closing it, when this process
        # knows which tables it used (a command's run ends here).
        with WRITES:
            optimize_sqlite(dbapi_conn)

    return engine


def postgres_engine(
    url: URL,
    *,
    durability: Durability,
    schema: str | None,
    pooler: str | None = None,
    connect_args: Mapping[str, Any] | None = None,
    engine: Engine | None = None,
) -> Engine:
    """The ledger's engine: one of its own from ``url``, or the user's ``engine`` (its pool, its
    connect arguments) with the ledger's events added. ``connect_args``: psycopg's and libpq's
    settings for every connection, over the ledger's defaults."""
    try:
        import psycopg  # noqa: F401
    except ImportError as exc:
        raise ConfigurationError(
            'a PostgreSQL ledger needs psycopg: pip install "call4agents-core[postgres]"'
        ) from exc
    if schema is not None and not SCHEMA_NAME.fullmatch(schema):
        raise ConfigurationError(
            f"schema name {schema!r} is not a plain identifier: use letters, digits and _"
        )
    pooler = pooler_of(url, pooler)
    driver_args: dict[str, Any] = {
        **pg_connect_args(url, durability, pooler),
        **_prepare_threshold(url, pooler),
        **(connect_args or {}),
    }
    translate = {"schema_translate_map": {None: schema}} if schema else {}
    if engine is None:
        engine = create_engine(
            url.difference_update_query([POOLER_SETTING, PREPARE_SETTING]),
            pool_size=8,
            max_overflow=8,
            connect_args=driver_args,
            execution_options=translate,
            # No column is HSTORE: no lookup of that type at the first connection (a catalog
            # query and a round trip in every process that opens the ledger).
            use_native_hstore=False,
        )
    elif translate:
        engine = engine.execution_options(**translate)
    # Instead of pool_pre_ping, which costs a round trip on every checkout: a connection the
    # server dropped (restart, failover, idle timeout) has its goodbye or EOF waiting on the
    # socket, so only a connection with unread input is pinged; a dead one makes the pool drop
    # every connection older than now and open a fresh one for this checkout.
    event.listen(engine, "checkout", _check_alive)
    if pooler is None:
        # A session setting: behind a pooler it would stay on a server connection others share.
        event.listen(engine, "connect", lambda dbapi_conn, _record: no_jit(dbapi_conn))
    elif durability == "process":
        event.listen(engine, "begin", _sync_off)
    _, params = engine.dialect.create_connect_args(engine.url)
    params.pop("context", None)  # SQLAlchemy's type adapters: the listener needs none
    _pg.register(
        engine,
        {**params, **driver_args},
        schema,
        listen=pooler != "transaction",
        sync_off=pooler is not None and durability == "process",
    )
    return engine


def _sync_off(conn: Any) -> None:
    # A read commits nothing, so the setting would change nothing there (through a pooler its
    # statement is one more round trip, on every read); a statement in autocommit is its own
    # transaction and carries SYNC_OFF itself (see Store).
    options = conn.get_execution_options()
    if not options.get("c4a_read", False) and options.get("isolation_level") != "AUTOCOMMIT":
        conn.exec_driver_sql(f"SELECT {SYNC_OFF}")


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
    allow_network_fs: bool | None = None,  # None: CALL4AGENTS_ALLOW_NETWORK_FS=1 or not
    pooler: str | None = None,
    connect_args: Mapping[str, Any] | None = None,
    engine: Engine | None = None,
) -> Engine:
    if durability not in ("power", "process"):
        raise ConfigurationError(
            f"durability={durability!r} is not known: use 'power' (survives power loss, the "
            "default) or 'process' (survives a crash of the process, faster)"
        )
    if url.get_backend_name() == "sqlite":
        if schema is not None:
            raise ConfigurationError("schema= applies to PostgreSQL ledgers only")
        if pooler is not None or connect_args is not None or engine is not None:
            raise ConfigurationError(
                "pooler=, connect_args= and engine= apply to PostgreSQL ledgers only (an SQLite "
                "ledger opens its own file from its URL)"
            )
        if allow_network_fs is None:
            allow_network_fs = os.environ.get("CALL4AGENTS_ALLOW_NETWORK_FS") == "1"
        return sqlite_engine(
            url,
            durability=durability,
            busy_timeout=busy_timeout,
            allow_network_fs=allow_network_fs,
        )
    return postgres_engine(
        url,
        durability=durability,
        schema=schema,
        pooler=pooler,
        connect_args=connect_args,
        engine=engine,
    )


# -- opening: what failed, and whether waiting may mend it ------------------------------------


def short_error(exc: BaseException) -> str:
    """The first line of a database error, without SQLAlchemy's statement and parameters."""
    text = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def database_failed(exc: BaseException) -> LedgerError:
    """A fault of the database (a dropped connection, a lock waited for too long) as the one-line
    error every command shows."""
    return LedgerError(f"the ledger database failed: {short_error(exc)}")


def cannot_open(url: str, exc: BaseException) -> LedgerError:
    """A ledger that could not be opened (no server, no file, no rights), ``url`` with its
    password masked."""
    error = short_error(exc)
    missing = _MISSING_DATABASE.search(error)
    if missing is not None:  # the server is up: the one step left is to make the database
        return LedgerError(
            f"cannot open the ledger at {url}: the PostgreSQL database {missing.group(1)!r} does "
            f"not exist. Create it ({_createdb(url, missing.group(1))}), then try again"
        )
    return LedgerError(
        f"cannot open the ledger at {url}: {error}. Check that the database is "
        "reachable and that you may write to it (`call4agents doctor`)."
    )


# PostgreSQL's FATAL for a database name the server does not have (libpq's wording).
_MISSING_DATABASE = re.compile(r'database "([^"]+)" does not exist')


def _createdb(url: str, name: str) -> str:
    """The ``createdb`` command that makes database ``name`` on the server ``url`` names."""
    parts = urlsplit(url)
    flags = [f"-h {parts.hostname}"] if parts.hostname else []
    flags += [f"-p {parts.port}"] if parts.port else []
    flags += [f"-U {parts.username}"] if parts.username else []
    return " ".join(["createdb", *flags, name])


# What a server says while it cannot take the ledger's writes for a while: it is down, starting,
# stopping or recovering, the network is cut, or it is a standby (perhaps about to be promoted).
_UNREACHABLE = (
    "connection refused",
    "could not connect",
    "timeout expired",
    "the database system is",
    "server closed the connection unexpectedly",
    "no route to host",
    "network is unreachable",
    "connection reset",
    "temporary failure in name resolution",
)
_READ_ONLY = ("read-only", "recovery is in progress", "during recovery", "hot standby")


def outage(exc: BaseException) -> str | None:
    """``"read-only"`` or ``"unreachable"`` when opening failed because no read-write server
    answers (worth trying again for a while); None for any other fault (a wrong password, no such
    database, a certificate refused), which waiting would not mend."""
    text = short_error(exc).lower()
    if any(word in text for word in _READ_ONLY):
        return "read-only"
    return "unreachable" if any(word in text for word in _UNREACHABLE) else None


class ReadOnlyServer(Exception):
    """The server takes no writes (a standby, or a session set read-only): found while opening,
    and judged as an outage, since a standby may be promoted."""


def refuse_read_only(engine: Engine) -> None:
    """Raise ``ReadOnlyServer`` if a PostgreSQL ledger's server would refuse its writes: a
    ledger opened on a standby would otherwise fail only at its first action."""
    if engine.dialect.name != "postgresql":
        return
    with engine.connect().execution_options(c4a_read=True) as conn:
        if conn.exec_driver_sql("SHOW transaction_read_only").scalar() == "on":
            raise ReadOnlyServer("the server is read-only")


def outage_error(why: str, url: str, exc: BaseException, waited: float) -> LedgerError:
    """The one error ``init`` raises after trying a read-write server for ``waited`` seconds."""
    if why == "read-only":
        return LedgerError(
            f"the server at {url} is read-only (a replica, or a standby not promoted within "
            f"{waited:g} s): point the URL at the primary or add target_session_attrs=read-write"
        )
    return LedgerError(
        f"no PostgreSQL server answered at {url} within {waited:g} s ({short_error(exc)}): check "
        "that it is up and reachable (`call4agents doctor`), or give it longer with open_retry="
    )


# The handles and the fault type the layers above name (only storage imports SQLAlchemy): an
# engine, a parsed URL, and what a database call raises when the database fails.
__all__ = [
    "NETWORK_FS",
    "URL",
    "DatabaseFault",
    "Durability",
    "Engine",
    "check_local_fs",
    "mount_fs_type",
]
DatabaseFault = SQLAlchemyError
