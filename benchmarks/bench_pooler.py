"""What a transaction pooler costs a fresh action, and where that time goes.

    .venv/bin/python benchmarks/bench_pooler.py [--postgres URL] [--pooled URL] [--n N]

Without ``--pooled`` it starts a PgBouncer of its own (Debian's ``pgbouncer``; as the
``postgres`` user when run as root, since PgBouncer refuses root) on a free port, in
``pool_mode=transaction`` with four server connections, in front of ``--postgres``'s server, and
stops it at the end. ``--pooled URL`` names a pooler already running there instead.

Cases, for each durability, interleaved in rounds (bench_core's ``interleave``) so that load on a
shared machine touches every case alike; every fresh effect is a new action:

round trip            a bare ``SELECT 1``, direct and through the pooler: what one more hop costs
floor (2 commits)     bench_core's floor, direct; ``floor through the pooler`` is the same sent
                      as a pooled client must (no prepared statement, no startup setting)
fresh effect          the ledger on a direct connection, as it is (psycopg prepares a statement
                      on the server after five uses)
... no prepare        the same with ``?prepare_threshold=none``: what preparing saves
... pooled            behind the pooler (``?c4a_pooler=transaction``), where nothing may be
                      prepared on a server connection the next transaction may not have

``x floor`` is each case over the direct floor. Below the table, the pooled fresh effect's extra
time is split into what the server spends parsing and planning statements it may not keep
prepared (``no prepare`` less ``direct``) and what the pooler's hops cost (``pooled`` less ``no
prepare``), with the hop of a bare round trip for comparison.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import sqlalchemy
from sqlalchemy.engine import URL, make_url

import call4agents as c4a

sys.path.insert(0, str(Path(__file__).parent))  # run as a script: bench_core sits beside it
from bench_core import (
    FLOOR,
    FRESH,
    POOLED_FLOOR,
    Chunk,
    Durability,
    Result,
    floor_chunk,
    interleave,
    open_postgres,
    print_table,
    send,
    timed,
)

DEFAULT_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
ROUND_TRIP, POOLED_TRIP = "round trip (SELECT 1), direct", "round trip (SELECT 1), pooled"
UNPREPARED, POOLED = FRESH + ", no prepare", FRESH + ", pooled"
BASES = (ROUND_TRIP, POOLED_TRIP, FLOOR)  # the cases shown without a ratio


# -- a PgBouncer of our own ----------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _as_owner(*command: str) -> list[str]:
    """PgBouncer refuses to run as root: run it as the postgres user then."""
    return ["runuser", "-u", "postgres", "--", *command] if os.geteuid() == 0 else list(command)


def _bouncer_ini(folder: Path, port: int, server: URL) -> str:
    target = (
        f"host={server.host or '127.0.0.1'} port={server.port or 5432} "
        f"dbname={server.database} user={server.username}"
    )
    if server.password:
        target += f" password={server.password}"
    return (
        f"[databases]\n{server.database} = {target}\n[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir = {folder}\n"
        f"auth_type = trust\nauth_file = {folder / 'users.txt'}\n"
        f"pidfile = {folder / 'pgbouncer.pid'}\nlogfile = {folder / 'pgbouncer.log'}\n"
        "pool_mode = transaction\ndefault_pool_size = 4\nmax_client_conn = 200\n"
    )


@contextlib.contextmanager
def own_bouncer(server_url: str) -> Iterator[str]:
    """A PgBouncer in transaction mode in front of ``server_url``'s server; yields its URL."""
    pgbouncer = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
    if not Path(pgbouncer).exists():
        sys.exit("bench_pooler needs PgBouncer (Debian: apt-get install pgbouncer) or --pooled URL")
    server = make_url(server_url)
    folder = Path(tempfile.mkdtemp(prefix="c4a-bench-pooler-"))
    port = _free_port()
    ini = folder / "pgbouncer.ini"
    ini.write_text(_bouncer_ini(folder, port, server))
    (folder / "users.txt").write_text(f'"{server.username}" ""\n')
    if os.geteuid() == 0:
        for item in (folder, ini, folder / "users.txt"):
            shutil.chown(item, "postgres")
    try:
        subprocess.run(_as_owner(pgbouncer, "-d", "-q", str(ini)), check=True, timeout=60)
        url = server.set(host="127.0.0.1", port=port, password=None)
        yield url.render_as_string(hide_password=False) + "?c4a_pooler=transaction"
    finally:
        pid = folder / "pgbouncer.pid"
        with contextlib.suppress(OSError, ValueError):
            os.kill(int(pid.read_text().split()[0]), signal.SIGTERM)
        shutil.rmtree(folder, ignore_errors=True)


def _until_up(url: str) -> None:
    import psycopg

    deadline = time.monotonic() + 30
    while True:
        try:
            psycopg.connect(_dsn(url), autocommit=True).close()
            return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _dsn(url: str) -> str:
    """psycopg's form of a ledger URL: no driver name, none of the ledger's own settings."""
    plain = make_url(url).difference_update_query(["c4a_pooler", "prepare_threshold"])
    return plain.set(drivername="postgresql").render_as_string(hide_password=False)


# -- the cases ------------------------------------------------------------------------------------


def round_trip_chunk(url: str) -> tuple[Chunk, Callable[[], None]]:
    import psycopg

    conn = psycopg.connect(_dsn(url), autocommit=True, prepare_threshold=None)
    cursor = conn.cursor()
    return (lambda ids: timed(lambda _: cursor.execute("SELECT 1").fetchone(), ids)), conn.close


def fresh_chunk(ledger: c4a.Ledger, run_id: str) -> Chunk:
    """A fresh effect per id, in a run of this case's own: no case repeats another's action."""

    def chunk(ids: range) -> list[int]:
        with c4a.run(run_id, ledger=ledger):
            return timed(send, ids)

    return chunk


def with_query(url: str, **query: str) -> str:
    return make_url(url).update_query_dict(query).render_as_string(hide_password=False)


def bench_durability(direct: str, pooled: str, durability: Durability, n: int) -> list[Result]:
    t = open_postgres(direct, durability, via=pooled)
    assert t.pooled_bare is not None
    ledgers = {
        FRESH: c4a.Ledger(direct, durability=durability, schema=t.schema),
        UNPREPARED: c4a.Ledger(
            with_query(direct, prepare_threshold="none"), durability=durability, schema=t.schema
        ),
        POOLED: c4a.Ledger(pooled, durability=durability, schema=t.schema),
    }
    trips = {ROUND_TRIP: round_trip_chunk(direct), POOLED_TRIP: round_trip_chunk(pooled)}
    try:
        cases: dict[str, Chunk] = {name: chunk for name, (chunk, _) in trips.items()}
        cases[FLOOR] = floor_chunk(t.bare)
        cases[POOLED_FLOOR] = floor_chunk(t.pooled_bare)
        tag = f"{os.getpid()}-{time.time_ns()}"
        for name, ledger in ledgers.items():
            cases[name] = fresh_chunk(ledger, f"{name}-{tag}")
        samples = interleave(cases, range(n), min(100, n), rounds=50)
    finally:
        for ledger in ledgers.values():
            ledger.close()
        for _, close in trips.values():
            close()
        t.close()
    backend = "postgresql"
    return [
        Result(backend, durability, name, found, floor=None if name in BASES else FLOOR)
        for name, found in samples.items()
    ]


def print_split(results: Sequence[Result]) -> None:
    """The pooled fresh effect's time over the direct one's, by cause (medians)."""
    for durability in ("power", "process"):
        got = {r.case: r.median_us for r in results if r.durability == durability}
        if not got:
            continue
        parse = got[UNPREPARED] - got[FRESH]
        hops = got[POOLED] - got[UNPREPARED]
        hop = got[POOLED_TRIP] - got[ROUND_TRIP]
        print(
            f"{durability}: pooled fresh effect {got[POOLED]:.0f} µs against {got[FRESH]:.0f} "
            f"direct: {parse:+.0f} µs parsing and planning unprepared statements, {hops:+.0f} µs "
            f"through the pooler (a bare round trip: {hop:+.0f} µs a hop); pooled over the "
            f"pooled floor {got[POOLED] / got[POOLED_FLOOR]:.2f}x"
        )


def header(args: argparse.Namespace, pooled: str) -> None:
    import psycopg

    runner = "uv run python" if os.environ.get("UV") else "python"
    print(f"command: {runner} {shlex.join(sys.argv)}")
    print(
        f"python {platform.python_version()}, SQLAlchemy {sqlalchemy.__version__}, psycopg "
        f"{psycopg.__version__}, call4agents {c4a.__version__}, {platform.system()} "
        f"{platform.machine()}, {os.cpu_count()} CPUs, load average "
        + " ".join(f"{x:.1f}" for x in os.getloadavg())
    )
    with psycopg.connect(_dsn(args.postgres), autocommit=True) as conn:
        version = conn.execute("SHOW server_version").fetchone()
    bouncer = subprocess.run(
        [shutil.which("pgbouncer") or "/usr/sbin/pgbouncer", "--version"],
        capture_output=True, text=True, check=False,
    ).stdout.splitlines()  # fmt: skip
    print(f"PostgreSQL {version[0] if version else '?'} at {args.postgres}")
    print(f"pooler: {pooled} ({bouncer[0] if bouncer else 'a pooler of your own'})")
    print(f"N={args.n} per case\n")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--postgres",
        default=os.environ.get("CALL4AGENTS_TEST_POSTGRES_URL", DEFAULT_URL),
        metavar="URL",
        help="the PostgreSQL server (direct)",
    )
    parser.add_argument(
        "--pooled", metavar="URL", help="a transaction pooler in front of it (default: start one)"
    )
    parser.add_argument("--n", type=int, default=1000, help="timed actions per case")
    parser.add_argument("--durability", choices=("power", "process", "both"), default="both")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    modes: tuple[Durability, ...] = (
        ("power", "process") if args.durability == "both" else (args.durability,)
    )
    with contextlib.ExitStack() as stack:
        pooled = args.pooled or stack.enter_context(own_bouncer(args.postgres))
        if "c4a_pooler" not in pooled:
            pooled = with_query(pooled, c4a_pooler="transaction")
        _until_up(pooled)
        header(args, pooled)
        results: list[Any] = []
        for durability in modes:
            results += bench_durability(args.postgres, pooled, durability, args.n)
    print_table(results)
    print()
    print_split(results)


if __name__ == "__main__":
    main()
