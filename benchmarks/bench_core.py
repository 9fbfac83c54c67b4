"""What one once-only action costs in call4agents, next to the bare storage floor under it.

    .venv/bin/python benchmarks/bench_core.py [--quick] [--postgres URL] [--pooled URL] [--n N]
        [--scale]

Every durability mode gets a fresh SQLite file (and, with PostgreSQL, a fresh schema that is
dropped at the end). The bare-driver floor and the library run against the same file or server,
interleaved in rounds so that disk and CPU drift touch every case alike. Times are
``time.perf_counter_ns`` around each single action, after a warm-up.

``floor`` does per action what the ledger's storage must do at least: two commits, one for the
intent (the library's INSERT ... ON CONFLICT DO NOTHING RETURNING) and one for the result
(UPDATE ... SET state='succeeded'), on a table built from the same DDL as ``c4a_effects``.
``floor: PK select`` is one bare lookup by key, the least a repeat from the database can cost:
the result (the one column a repeat reads), on a kept cursor in autocommit, of the very rows the
lone repeats read, each timed inside its own ``c4a.run`` block exactly as a lone repeat is
(back-to-back lookups in a tight loop run faster than the same lookups between other work, which
would make the floor look cheaper than any repeat could be). On PostgreSQL it runs on the session
the repeats use (see ``same_session``).
``floor, async`` sends each of the floor's two commits through ``asyncio.to_thread``, as any
async caller must that may not block its event loop on the driver: the floor of the async path.

``--pooled URL`` runs the PostgreSQL cases once more with the ledger behind a pooler (a URL of
PgBouncer in transaction mode in front of ``--postgres``'s server, with
``?c4a_pooler=transaction``), as ``postgresql pooled``: its floor is still the direct
connection's, so its ratio says what the pooler adds to a fresh action against the same floor as
the direct rows. Beside it, ``floor through the pooler`` is the same bare floor sent through the
pooler as a pooled client must send it: no server-side prepared statement (the next transaction
may run on another server connection), the table named with its schema (no startup
``search_path``), and at ``process`` synchronous commit turned off inside each statement (no
startup ``options``), so it costs no extra round trip. Its ratio to the direct floor is what the
pooler alone costs a client that does the least.

Repeats: ``same process`` is served from memory; ``new process: lone`` is each action the first
repeat of its own run, in a new view of the ledger (one read of the database); ``new process:
resumed run`` repeats runs of RUN_SIZE actions in a new view (at a run's second repeat, its
recorded results are read in one query; the rest come from memory).

A run's own cost: ``empty run`` is ``with c4a.run(new_id): pass`` (the run's records read as it is
entered and written as it leaves), ``run of one fresh effect`` the same block around one fresh
action, both timed whole and shown against ``fresh effect (sync)`` (one fresh action inside a run
already open) measured in the same rounds. ``--runs`` times these four cases alone, then a run of
one in its three parts (entering, the action, leaving), each timed on its own, new runs one
after another.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import platform
import shlex
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

import sqlalchemy
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.schema import CreateIndex, CreateTable

import call4agents as c4a
from call4agents.storage.tables import effects

T = TypeVar("T")
Durability = Literal["power", "process"]
Chunk = Callable[[range], list[int]]  # times one action per id, in ns

RUN_ID = "bench-run"
FLOOR = "floor (2 commits)"
POOLED_FLOOR = "floor through the pooler"
SELECT_FLOOR = "floor: PK select"
AFLOOR = "floor, async (2 commits in threads)"
FRESH, AFRESH = "fresh effect (sync)", "fresh effect (async)"
EMPTY_RUN = "empty run (c4a.run, nothing inside)"
RUN_OF_ONE = "run of one fresh effect"
ENTERING, ITS_ACTION, LEAVING = "  its entering", "  its one fresh effect", "  its leaving"
CACHED = "repeat (same process)"
FROM_DB = "repeat, new process: lone"  # the first repeat of its run: one database read
RESUMED = "repeat, new process: resumed run"  # a whole run repeated: read at once
OWNER = "bench-host/0a1b2c3d/4242/123456"  # shaped like the library's lease owner
SCALE_SIZES = (1_000, 100_000, 1_000_000)


@c4a.effect(name="bench.send")
def send(i: int, to: str = "bob@example.com") -> dict[str, Any]:
    return {"ok": True, "id": i}


@c4a.effect(name="bench.asend")
async def asend(i: int, to: str = "bob@example.com") -> dict[str, Any]:
    return {"ok": True, "id": i}


# -- results ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Result:
    """One line of the table: the per-action times of one case."""

    backend: str
    durability: str
    case: str
    samples_ns: Sequence[int] = field(repr=False)
    floor: str | None = FLOOR  # the case this one is compared with; None for a floor itself

    @property
    def median_us(self) -> float:
        return statistics.median(self.samples_ns) / 1000

    @property
    def mean_us(self) -> float:
        # What throughput sees: fsync outliers count in full here, not in the median.
        return statistics.fmean(self.samples_ns) / 1000

    def pct_us(self, q: float) -> float:
        ordered = sorted(self.samples_ns)
        return ordered[int(q * (len(ordered) - 1))] / 1000


def ratios(result: Result, results: Sequence[Result]) -> tuple[float, float] | None:
    """This case over its floor, by median and by mean (measured in the same run)."""
    if result.floor is None:
        return None
    for other in results:
        same = (other.backend, other.durability) == (result.backend, result.durability)
        if same and other.case == result.floor:
            return result.median_us / other.median_us, result.mean_us / other.mean_us
    return None


def print_table(results: Sequence[Result]) -> None:
    head = (
        f"{'backend':<17} {'durability':<10} {'case':<36} {'median µs':>10} {'mean µs':>10}"
        f" {'p95 µs':>10} {'p99 µs':>10} {'x floor (median/mean)':>22}"
    )
    print(head)
    print("-" * len(head))
    for r in results:
        x = ratios(r, results)
        shown = "-" if x is None else f"{x[0]:.2f} / {x[1]:.2f}"
        print(
            f"{r.backend:<17} {r.durability:<10} {r.case:<36} {r.median_us:>10.1f} "
            f"{r.mean_us:>10.1f} {r.pct_us(0.95):>10.1f} {r.pct_us(0.99):>10.1f} {shown:>22}"
        )


# -- timing ---------------------------------------------------------------------------------------


def timed(op: Callable[[T], object], items: Iterable[T]) -> list[int]:
    samples = []
    for item in items:
        start = time.perf_counter_ns()
        op(item)
        samples.append(time.perf_counter_ns() - start)
    return samples


async def atimed(op: Callable[[T], Awaitable[object]], items: Iterable[T]) -> list[int]:
    samples = []
    for item in items:
        start = time.perf_counter_ns()
        await op(item)
        samples.append(time.perf_counter_ns() - start)
    return samples


def interleave(
    cases: dict[str, Chunk], ids: range, warm: int, rounds: int = 10
) -> dict[str, list[int]]:
    """Warm every case up on ids just below ``ids``, then time each case on a slice per round."""
    for chunk in cases.values():
        chunk(range(ids.start - warm, ids.start))
    samples: dict[str, list[int]] = {name: [] for name in cases}
    step = -(-len(ids) // rounds)
    for start in range(ids.start, ids.stop, step):
        for name, chunk in cases.items():
            samples[name] += chunk(range(start, min(start + step, ids.stop)))
    return samples


# -- the bare floor ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sql:
    """How one dialect spells what the floor needs."""

    mark: str  # parameter placeholder
    now: str  # the database clock in epoch seconds, as the library computes it
    begin: str | None  # statement that opens a write transaction (None: the driver does)


SQLITE_SQL = Sql("?", "((julianday('now') - 2440587.5) * 86400.0)", "BEGIN IMMEDIATE")
PG_SQL = Sql("%s", "extract(epoch from clock_timestamp())::float8", None)


def floor_ddl(dialect: sqlalchemy.Dialect) -> list[str]:
    """The DDL of c4a_effects and its indexes, renamed to bench_floor."""
    ddl = [CreateTable(effects), *(CreateIndex(ix) for ix in effects.indexes)]
    return [str(d.compile(dialect=dialect)).replace("c4a_effects", "bench_floor") for d in ddl]


def fake_key(tag: str, i: int) -> str:
    return hashlib.sha256(f"{tag}|{i}".encode()).hexdigest()


# A repeat of a finished action reads its result by key, and nothing else.
REPEAT_SELECT = "SELECT result FROM {table} WHERE key = {m}"


class Bare:
    """The bare driver (sqlite3 or psycopg), no SQLAlchemy: ``conn`` writes, ``reader`` looks up
    in autocommit (one statement, one round trip) on a cursor it keeps. ``table``: the floor's
    table as the statements name it; ``setting``: a value each write computes first (a pooled
    client's ``set_config``, which must ride inside the statement)."""

    def __init__(
        self,
        conn: Any,
        sql: Sql,
        reader: Any = None,
        table: str = "bench_floor",
        setting: str | None = None,
        tag: str = "floor",
    ) -> None:
        self.conn, self.sql, self.reader, self.tag = conn, sql, reader or conn, tag
        self.cursor = self.reader.cursor()
        m, now = sql.mark, sql.now
        values = f"{m}, {m}, {m}, {m}, {m}, {m}, 'started', 1, {now} + {m}, {now}, {now}"
        source = f"VALUES ({values})"
        if setting is not None:
            source = f"SELECT {values} FROM (SELECT {setting}) AS one"
        self.insert = (
            f"INSERT INTO {table} (key, run_id, tool, kind, args, owner, state, attempt, "
            f"lease_expires_at, created_at, updated_at) {source} ON CONFLICT (key) DO NOTHING "
            "RETURNING attempt"
        )
        self.update = (
            f"UPDATE {table} SET state = 'succeeded', result = {m}, error = NULL, note = NULL,"
            f" owner = NULL, lease_expires_at = NULL, updated_at = {now} "
            + ("" if setting is None else f"FROM (SELECT {setting}) AS one ")
            + f"WHERE key = {m} AND attempt = 1 AND state IN ('started', 'in_doubt')"
        )
        self.select = REPEAT_SELECT.format(table="c4a_effects", m=m)

    def commit(self, stmt: str, params: Sequence[Any], *, fetch: bool = False) -> None:
        if self.sql.begin:
            self.conn.execute(self.sql.begin)
        cursor = self.conn.execute(stmt, params)
        if fetch:
            cursor.fetchone()
        self.conn.commit()

    def action(self, i: int, between: float = 0.0) -> None:
        """Intent, then result; ``between`` seconds of the tool's own work in the middle."""
        key = fake_key(self.tag, i)
        self.commit(self.insert, (key, RUN_ID, "bench.send", "write", f'{{"i":{i}}}', OWNER, 30.0),
                    fetch=True)  # fmt: skip
        if between:
            time.sleep(between)
        self.commit(self.update, (f'{{"ok":true,"id":{i}}}', key))

    def lookup(self, key: str) -> None:
        self.cursor.execute(self.select, (key,)).fetchone()


def sqlite_bare(path: Path, durability: Durability) -> Bare:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA synchronous={'FULL' if durability == 'power' else 'NORMAL'}")
    return Bare(conn, SQLITE_SQL)


def pg_bare(url: str, schema: str, durability: Durability) -> Bare:
    import psycopg

    options = f"-c search_path={schema}"
    if durability == "process":
        options += " -c synchronous_commit=off"
    url = url.replace("+psycopg", "", 1)
    conn = psycopg.connect(url, options=options, autocommit=False)
    return Bare(conn, PG_SQL, reader=psycopg.connect(url, options=options, autocommit=True))


def pg_bare_pooled(url: str, schema: str, durability: Durability) -> Bare:
    """The bare floor through a transaction pooler: what ``Bare`` does, as a pooled client may."""
    import psycopg

    from call4agents.storage._db import POOLER_SETTING, SYNC_OFF

    plain = sqlalchemy.engine.make_url(url).difference_update_query([POOLER_SETTING])
    dsn = plain.set(drivername="postgresql").render_as_string(hide_password=False)
    conn = psycopg.connect(dsn, autocommit=False, prepare_threshold=None)
    setting = SYNC_OFF if durability == "process" else None
    return Bare(conn, PG_SQL, table=f'"{schema}".bench_floor', setting=setting, tag="pooled")


# -- one backend in one durability mode --------------------------------------------------------


@dataclass
class Target:
    backend: str
    durability: Durability
    url: str
    schema: str | None
    bare: Bare
    scale: bool = False  # measured by bench_scale, not bench_target
    via: str | None = None  # the ledger's URL when it goes through a pooler
    pooled_bare: Bare | None = None  # the floor through that pooler

    def ledger(self) -> c4a.Ledger:
        return c4a.Ledger(self.via or self.url, durability=self.durability, schema=self.schema)

    def result(self, case: str, samples: Sequence[int], floor: str | None = FLOOR) -> Result:
        return Result(self.backend, self.durability, case, samples, floor)

    def close(self) -> None:
        self.bare.reader.close()
        self.bare.conn.close()
        if self.pooled_bare is not None:
            self.pooled_bare.conn.close()
        if self.schema:  # made for this run only; a new connection, in case the old one died
            import psycopg

            with psycopg.connect(self.url.replace("+psycopg", "", 1), autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{self.schema}" CASCADE')


def open_sqlite(folder: Path, durability: Durability, tag: str = "") -> Target:
    path = folder / f"ledger-{durability}{tag}.db"
    url = f"sqlite:///{path}"
    c4a.Ledger(url, durability=durability).close()  # creates the ledger's tables
    bare = sqlite_bare(path, durability)
    for ddl in floor_ddl(sqlite.dialect()):
        bare.conn.execute(ddl)
    return Target("sqlite", durability, url, None, bare, scale=bool(tag))


def open_postgres(
    url: str, durability: Durability, tag: str = "", via: str | None = None
) -> Target:
    schema = f"c4a_bench_{os.getpid()}_{durability}{tag}{'_pooled' if via else ''}"
    c4a.Ledger(url, durability=durability, schema=schema).close()
    bare = pg_bare(url, schema, durability)
    for ddl in floor_ddl(postgresql.dialect()):
        bare.conn.execute(ddl)
    bare.conn.commit()
    backend = "postgresql pooled" if via else "postgresql"
    pooled = pg_bare_pooled(via, schema, durability) if via else None
    return Target(backend, durability, url, schema, bare, scale=bool(tag), via=via,
                  pooled_bare=pooled)  # fmt: skip


# -- the cases -----------------------------------------------------------------------------------


def floor_chunk(bare: Bare) -> Chunk:
    return lambda ids: timed(bare.action, ids)


def sync_chunk(ledger: c4a.Ledger, op: Callable[[int], object]) -> Chunk:
    def chunk(ids: range) -> list[int]:
        with c4a.run(RUN_ID, ledger=ledger):
            return timed(op, ids)

    return chunk


def async_floor_chunk(bare: Bare, loop: asyncio.AbstractEventLoop) -> Chunk:
    async def action(i: int) -> None:
        key = fake_key("afloor", i)
        args = (key, RUN_ID, "bench.send", "write", f'{{"i":{i}}}', OWNER, 30.0)
        await asyncio.to_thread(bare.commit, bare.insert, args, fetch=True)
        await asyncio.to_thread(bare.commit, bare.update, (f'{{"ok":true,"id":{i}}}', key))

    return lambda ids: loop.run_until_complete(atimed(action, ids))


def async_chunk(ledger: c4a.Ledger, loop: asyncio.AbstractEventLoop) -> Chunk:
    async def timed_in_run(ids: range) -> list[int]:
        async with c4a.run(RUN_ID, ledger=ledger):
            return await atimed(asend, ids)

    return lambda ids: loop.run_until_complete(timed_in_run(ids))


def whole_run_chunk(ledger: c4a.Ledger, tag: str, inside: Callable[[int], object] | None) -> Chunk:
    """A new run per id, its block timed whole: entering, ``inside(i)`` if any, leaving."""

    def one(i: int) -> None:
        with c4a.run(f"{tag}-{i}", ledger=ledger):
            if inside is not None:
                inside(i)

    return lambda ids: timed(one, ids)


def run_parts(ledger: c4a.Ledger, n: int, warm: int) -> dict[str, list[int]]:
    """A run of one in parts, a new run per id: entering it, its one fresh action, leaving it."""
    parts: dict[str, list[int]] = {ENTERING: [], ITS_ACTION: [], LEAVING: []}
    for i in range(-warm, n):
        block = c4a.run(f"parts-{i}", ledger=ledger)
        t0 = time.perf_counter_ns()
        block.__enter__()
        t1 = time.perf_counter_ns()
        send(i, to="dave@example.com")
        t2 = time.perf_counter_ns()
        block.__exit__(None, None, None)
        t3 = time.perf_counter_ns()
        if i >= 0:
            for name, ns in zip(parts, (t1 - t0, t2 - t1, t3 - t2), strict=True):
                parts[name].append(ns)
    return parts


def run_cases(ledger: c4a.Ledger) -> dict[str, Chunk]:
    return {
        EMPTY_RUN: whole_run_chunk(ledger, "empty", None),
        # Its own arguments, so each action is fresh (not a repeat of the open run's).
        RUN_OF_ONE: whole_run_chunk(ledger, "one", lambda i: send(i, to="carol@example.com")),
    }


def bench_writes(
    t: Target, ledger: c4a.Ledger, n: int, warm: int, *, runs_only: bool = False
) -> list[Result]:
    loop = asyncio.new_event_loop()
    cases = {FLOOR: floor_chunk(t.bare), FRESH: sync_chunk(ledger, send), **run_cases(ledger)}
    if not runs_only:
        cases |= {AFLOOR: async_floor_chunk(t.bare, loop), AFRESH: async_chunk(ledger, loop)}
    if t.pooled_bare is not None and not runs_only:
        cases[POOLED_FLOOR] = floor_chunk(t.pooled_bare)
    samples = interleave(cases, range(n), warm)
    loop.close()
    runs = [t.result(EMPTY_RUN, samples[EMPTY_RUN], floor=FRESH),
            t.result(RUN_OF_ONE, samples[RUN_OF_ONE], floor=FRESH)]  # fmt: skip
    if runs_only:
        parts = run_parts(ledger, n, warm)
        runs += [t.result(name, found, floor=FRESH) for name, found in parts.items()]
        return [t.result(FLOOR, samples[FLOOR], floor=None), t.result(FRESH, samples[FRESH]), *runs]
    pooled = [t.result(POOLED_FLOOR, samples[POOLED_FLOOR])] if t.pooled_bare else []
    return [
        t.result(FLOOR, samples[FLOOR], floor=None),
        *pooled,
        t.result(AFLOOR, samples[AFLOOR], floor=None),
        t.result(FRESH, samples[FRESH]),
        t.result(AFRESH, samples[AFRESH], floor=AFLOOR),
        *runs,
    ]


RUN_SIZE = 50  # actions per run in the resumed-run case: an agent loop of some length


def lone_run(i: int) -> str:
    return f"lone-{i}"


def resumed_run(i: int) -> str:
    return f"resumed-{i // RUN_SIZE}"


def runs_chunk(
    ledger: c4a.Ledger, run_of: Callable[[int], str], op: Callable[[int], object] = send
) -> Chunk:
    """``op(i)`` (action ``i``) in run ``run_of(i)``; only ``op`` is timed, not entering the run."""

    def chunk(ids: range) -> list[int]:
        samples = []
        for i in ids:
            with c4a.run(run_of(i), ledger=ledger):
                start = time.perf_counter_ns()
                op(i)
                samples.append(time.perf_counter_ns() - start)
        return samples

    return chunk


def bench_repeats(t: Target, ledger: c4a.Ledger, n: int, warm: int) -> list[Result]:
    """The cache repeat, then each key once through a new Ledger, against a bare lookup."""
    cached = sync_chunk(ledger, lambda _: send(0))(range(max(10 * n, 10_000)))
    for run_of in (lone_run, resumed_run):  # written before the clock starts
        runs_chunk(ledger, run_of)(range(-warm, n))
    # The PK select reads the very rows the lone repeats read, in the same loop.
    keys = {r.args["i"]: r.key for r in ledger.effects() if r.run_id == lone_run(r.args["i"])}
    new_view = t.ledger()  # same database, empty cache: what a resumed process sees
    lookup = t.bare.lookup if t.schema is None else same_session(new_view, t.schema)
    cases = {
        SELECT_FLOOR: runs_chunk(new_view, lone_run, lambda i: lookup(keys[i])),
        FROM_DB: runs_chunk(new_view, lone_run),
        RESUMED: runs_chunk(new_view, resumed_run),
    }
    samples = interleave(cases, range(n), warm)
    new_view.close()
    return [
        t.result(CACHED, cached, floor=None),
        t.result(SELECT_FLOOR, samples[SELECT_FLOOR], floor=None),
        t.result(FROM_DB, samples[FROM_DB], floor=SELECT_FLOOR),
        t.result(RESUMED, samples[RESUMED], floor=SELECT_FLOOR),
    ]


def same_session(ledger: c4a.Ledger, schema: str) -> Callable[[str], None]:
    """The bare PK select, on the very PostgreSQL session a one-thread caller's repeats use.

    On a machine with few CPUs, a loopback round trip costs several times more when the server
    process of a session runs on another CPU than the client's (a wake-up across CPUs; see
    ``bench_postgres.py --parts placement``), and each session's server process tends to stay
    where it is for seconds. A floor measured on a session of its own would compare two
    placements, not two lookups."""
    cursor = kept_driver(ledger).cursor()
    sql = REPEAT_SELECT.format(table=f'"{schema}".c4a_effects', m="%s")

    def lookup(key: str) -> None:
        cursor.execute(sql, (key,)).fetchone()

    return lookup


def kept_driver(ledger: c4a.Ledger) -> Any:
    """The driver connection under the ledger's kept connection for reads: a single thread's
    repeats use exactly this one (see storage._kept)."""
    ledger.store.get("")  # checks it out and keeps it
    conn = ledger.store._reads._idle[-1][0]
    return conn.connection.driver_connection


def bench_target(t: Target, n: int, warm: int, *, runs_only: bool = False) -> list[Result]:
    ledger = t.ledger()
    try:
        if runs_only:
            return bench_writes(t, ledger, n, warm, runs_only=True)
        *floors, afloor, fresh, afresh, empty, one = bench_writes(t, ledger, n, warm)
        cached, select_floor, *from_db = bench_repeats(t, ledger, n, warm)
    finally:
        ledger.close()
    return [*floors, afloor, select_floor, fresh, afresh, empty, one, cached, *from_db]


# -- ledger size -----------------------------------------------------------------------------------


def fill_sql(table: str, sql: Sql) -> str:
    """A bare INSERT ... SELECT of rows numbered {mark}..{mark}, shaped like succeeded actions."""
    m, now = sql.mark, sql.now
    head, source = "", f"generate_series({m}::bigint, {m}::bigint) AS s(i)"
    key = "encode(sha256(('fill-' || i)::bytea), 'hex')"
    if sql is SQLITE_SQL:  # no generate_series or sha256 in a bare SQLite
        head = f"WITH RECURSIVE s(i) AS (SELECT {m} UNION ALL SELECT i + 1 FROM s WHERE i < {m}) "
        source, key = "s", "lower(hex(randomblob(32)))"
    return (
        f"{head}INSERT INTO {table} (key, run_id, tool, kind, state, attempt, args, result, "
        f"created_at, updated_at) SELECT {key}, 'run-' || (i / 20), 'agent.send_email', 'write',"
        """ 'succeeded', 1, '{"to":"user' || i || '@example.com"}', '{"id":' || i || '}', """
        f"{now} - 86400 + i * 0.001, {now} - 86400 + i * 0.001 FROM {source}"
    )


def fill(bare: Bare, table: str, size: int, batch: int = 100_000) -> None:
    """Add rows until ``table`` holds ``size``, one transaction per batch; ANALYZE on PostgreSQL."""
    have = bare.conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
    for lo in range(have, size, batch):  # row numbers go on from the count, so keys stay unique
        bare.commit(fill_sql(table, bare.sql), (lo, min(lo + batch, size) - 1))
    if bare.sql is PG_SQL:  # fresh statistics, rather than an autovacuum mid-measurement
        bare.commit(f"ANALYZE {table}", ())
    bare.conn.commit()


def bench_scale(t: Target, n: int, warm: int) -> list[Result]:
    """Floor and fresh effect as both tables grow to each of SCALE_SIZES (n/4 actions each)."""
    results: list[Result] = []
    ledger = t.ledger()
    cases = {FLOOR: floor_chunk(t.bare), FRESH: sync_chunk(ledger, send)}
    try:
        for size in SCALE_SIZES:
            for table in ("c4a_effects", "bench_floor"):
                fill(t.bare, table, size)
            ids = range(size * 10, size * 10 + max(100, n // 4))  # ids not met before
            samples = interleave(cases, ids, warm)
            label = f" @ {size:,} rows"
            results += [t.result(FLOOR + label, samples[FLOOR], floor=None),
                        t.result(FRESH + label, samples[FRESH], floor=FLOOR + label)]  # fmt: skip
    finally:
        ledger.close()
    return results


# -- main ------------------------------------------------------------------------------------------


def header(args: argparse.Namespace, folder: Path) -> None:
    runner = "uv run python" if os.environ.get("UV") else "python"
    print(f"command: {runner} {shlex.join(sys.argv)}")
    print(
        f"python {platform.python_version()}, SQLite {sqlite3.sqlite_version}, "
        f"SQLAlchemy {sqlalchemy.__version__}, call4agents {c4a.__version__}, "
        f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs"
    )
    print(f"N={args.n} per case (warm-up {args.warm}); SQLite files in {folder}")
    if args.postgres:
        import psycopg

        print(f"PostgreSQL: {args.postgres} (psycopg {psycopg.__version__})")
    print()


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a ~15 s run with fewer samples")
    parser.add_argument(
        "--postgres",
        default=os.environ.get("CALL4AGENTS_TEST_POSTGRES_URL"),
        metavar="URL",
        help="also run on this PostgreSQL server",
    )
    parser.add_argument(
        "--pooled",
        metavar="URL",
        help="also run the PostgreSQL cases with the ledger behind this pooler's URL",
    )
    parser.add_argument("--n", type=int, help="timed actions per case")
    parser.add_argument("--scale", action="store_true", help="fresh effect at 1k/100k/1M rows")
    parser.add_argument(
        "--runs", action="store_true", help="only the floor, a fresh effect and whole runs"
    )
    args = parser.parse_args(argv)
    args.n = args.n or (300 if args.quick else 2000)
    args.warm = min(100, args.n)
    return args


def open_targets(args: argparse.Namespace, folder: Path, tag: str = "") -> list[Target]:
    modes: tuple[Durability, ...] = ("process",) if tag else ("power", "process")
    targets = [open_sqlite(folder, d, tag) for d in modes]
    if args.postgres:
        targets += [open_postgres(args.postgres, d, tag) for d in modes]
        if args.pooled and not tag:
            targets += [open_postgres(args.postgres, d, via=args.pooled) for d in modes]
    return targets


def run_all(args: argparse.Namespace, folder: Path) -> list[Result]:
    results: list[Result] = []
    targets = open_targets(args, folder)
    if args.scale:  # fresh files and schemas, so that the sizes are the sizes
        targets += open_targets(args, folder, tag="_scale")
    try:
        for t in targets:
            if t.scale:
                results += bench_scale(t, args.n, args.warm)
            else:
                results += bench_target(t, args.n, args.warm, runs_only=args.runs)
    finally:
        for t in targets:
            t.close()
    return results


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="c4a-bench-") as tmp:
        header(args, Path(tmp))
        results = run_all(args, Path(tmp))
    print_table(results)
    print(
        f"\nx floor: {FRESH!r} and {POOLED_FLOOR!r} against {FLOOR!r} (the direct connection's, "
        f"pooled or not), {AFRESH!r} against {AFLOOR!r}, repeats from a new process against "
        f"{SELECT_FLOOR!r}, {EMPTY_RUN!r} and {RUN_OF_ONE!r} against {FRESH!r} (the goal: "
        "a run of one at most 2x)."
    )


if __name__ == "__main__":
    main()
