"""Call4Agents on a shared PostgreSQL ledger, next to bare psycopg on the same server.

    .venv/bin/python benchmarks/bench_postgres.py [--quick] [--postgres URL] [--n N]
                                               [--workers 8] [--gc-rows 1000000]

Four parts, one run, one server (each part in a fresh schema, dropped at the end):

latency      per action, one worker, interleaved with the floor (bench_core's cases):
             ``floor (2 commits)`` is the intent INSERT and the result UPDATE through bare
             psycopg, two commits; ``floor: PK select`` is one bare lookup by key, the least a
             repeat from the database can cost.
throughput   actions per second of 1 and of ``--workers`` processes started together, each on
             its own keys: the floor, a fresh effect, a bare PK select and a repeat (each process
             a new view of the ledger, each action the first repeat of its run: a database read),
             and the CPU time each action takes in the process of a lone worker: with more
             workers than CPUs, that is what bounds how far they scale.
retention    ``gc`` over ``--gc-rows`` old actions while a worker records fresh ones: how long,
             the longest batch transaction, and the worker's latency before and during it.
placement    the PK select and a lone repeat on one session, with this process held on CPU 0
             and the session's server process on CPU 0, then on CPU 1: what a loopback round
             trip costs by where the server runs (Linux, a server on this machine, and the
             right to set its process's CPU: root or the server's user).

Targets (the issue's): a fresh effect within 1.3x the floor; a repeat within 1.3x a PK select;
``--workers`` processes at least 4x one process's throughput. The machine's CPU count bounds the
last one: with fewer cores than workers, processes queue for CPU rather than for the database.
"""

from __future__ import annotations

import argparse
import itertools
import multiprocessing as mp
import os
import platform
import queue
import shlex
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.synchronize import Event
from pathlib import Path
from typing import Any

import sqlalchemy
from sqlalchemy import event

import call4agents as c4a

sys.path.insert(0, str(Path(__file__).parent))  # run as a script: bench_core sits beside it
from bench_core import (
    FLOOR,
    FRESH,
    FROM_DB,
    RESUMED,
    RUN_ID,
    SELECT_FLOOR,
    Result,
    Target,
    bench_target,
    interleave,
    kept_driver,
    lone_run,
    open_postgres,
    pg_bare,
    print_table,
    runs_chunk,
    same_session,
    send,
    timed,
)

DEFAULT_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
# A real tool waits on a provider (an email API, a payment network): this long, in the
# throughput cases that model it. The ledger's work per action stays the same.
PROVIDER_SECONDS = 0.01
WITH_PROVIDER = " (tool waits 10 ms)"


@c4a.effect(name="bench.send_via_provider")
def send_via_provider(i: int, to: str = "bob@example.com") -> dict[str, Any]:
    time.sleep(PROVIDER_SECONDS)
    return {"ok": True, "id": i}


# -- throughput: worker processes started together ---------------------------------------------


@dataclass(frozen=True)
class Job:
    case: str  # floor | fresh | select | repeat | floor_provider | fresh_provider
    url: str
    schema: str
    first: int  # this process's ids are first .. first + count - 1
    count: int


def _operation(job: Job) -> tuple[Callable[[int], object], Callable[[], None]]:
    """What one process does per id, and how it cleans up."""
    if job.case in ("floor", "select", "floor_provider"):
        bare = pg_bare(job.url, job.schema, "power")
        if job.case == "floor":
            return bare.action, bare.conn.close
        if job.case == "floor_provider":
            return lambda i: bare.action(i, between=PROVIDER_SECONDS), bare.conn.close
        return lambda i: bare.lookup(fake_key_of_send(i)), bare.conn.close
    ledger = c4a.Ledger(job.url, schema=job.schema)
    # A repeat is each action's first in a new process, so each goes to the database.
    run_of = lone_run if job.case == "repeat" else (lambda _: RUN_ID)
    tool = send_via_provider if job.case == "fresh_provider" else send

    def op(i: int) -> object:
        with c4a.run(run_of(i), ledger=ledger):
            return tool(i)

    return op, ledger.close


_KEYS: dict[int, str] = {}


def fake_key_of_send(i: int) -> str:
    return _KEYS[i]


def _worker(job: Job, keys: dict[int, str], ready: Any, go: Event, out: Any) -> None:
    _KEYS.update(keys)
    op, close = _operation(job)
    for i in range(job.first - 20, job.first):  # warm: connections, statement caches
        op(i)
    ready.put(os.getpid())
    go.wait()
    start = time.monotonic()  # one system-wide clock on Linux, so processes compare
    cpu = time.process_time()
    for i in range(job.first, job.first + job.count):
        op(i)
    out.put((start, time.monotonic(), job.count, time.process_time() - cpu))
    close()


def run_together(jobs: Sequence[Job], keys: dict[int, str]) -> tuple[float, float]:
    """Actions per second of ``jobs`` run by one process each, started at the same moment, and
    the CPU time (user and system) each action took in its own process, in µs."""
    ctx = mp.get_context("spawn")
    ready, out, go = ctx.Queue(), ctx.Queue(), ctx.Event()
    procs = [ctx.Process(target=_worker, args=(j, keys, ready, go, out)) for j in jobs]
    for p in procs:
        p.start()
    waiting = len(procs)
    while waiting:
        try:
            ready.get(timeout=1)
            waiting -= 1
        except queue.Empty:
            if any(p.exitcode not in (None, 0) for p in procs):
                for p in procs:
                    p.kill()
                raise RuntimeError("a worker process failed before it was ready") from None
    go.set()
    spans = [out.get(timeout=600) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    actions = sum(n for _, _, n, _ in spans)
    seconds = max(e for _, e, _, _ in spans) - min(s for s, _, _, _ in spans)
    return actions / seconds, sum(c for *_, c in spans) / actions * 1e6


@dataclass(frozen=True)
class Rate:
    case: str
    one: float  # actions per second, one process
    many: float  # with ``workers`` processes
    cpu_us: float  # CPU time per action in the one process (the server's is not counted)


def bench_throughput(url: str, workers: int, per_worker: int) -> list[Rate]:
    t = open_postgres(url, "power", tag="_tp")
    try:
        ledger = t.ledger()
        total = per_worker * (1 + workers) + 20 * (1 + workers)
        for i in range(1_000_000, 1_000_000 + total):  # what the repeat and select cases find
            with c4a.run(lone_run(i), ledger=ledger):
                send(i)
        keys = {r.args["i"]: r.key for r in ledger.effects()}
        ledger.close()
        rates = []
        for case, base, count in (
            ("floor", 0, per_worker),
            ("fresh", 0, per_worker),
            ("select", 1_000_000, per_worker),
            ("repeat", 1_000_000, per_worker),
            # Fewer: each waits on its provider. Their own ids, apart from the floor's and fresh's.
            ("floor_provider", 5_000_000, per_worker // 4),
            ("fresh_provider", 5_000_000, per_worker // 4),
        ):
            one, cpu = run_together([Job(case, url, t.schema or "", base + 20, count)], keys)
            step = count + 20
            jobs = [
                Job(case, url, t.schema or "", base + 20 + step * (k + 1), count)
                for k in range(workers)
            ]
            rates.append(Rate(case, one, run_together(jobs, keys)[0], cpu))
        return rates
    finally:
        t.close()


# -- retention ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class GcRun:
    rows: int
    seconds: float
    batches: int
    longest_batch_ms: float
    before: list[int]  # the worker's fresh-effect times before gc, ns
    during: list[int]  # and while gc ran


def _collect(url: str, schema: str, out: Any) -> None:
    """gc in a process of its own, as ``call4agents gc`` runs from cron: (pruned, commit times)."""
    collector = c4a.Ledger(url, schema=schema)
    commits: list[float] = []
    event.listen(collector.engine, "commit", lambda *_: commits.append(time.monotonic()))
    out.put(("started", time.monotonic()))
    report = collector.gc(3600)
    collector.close()
    out.put(("done", report.pruned, commits))


def bench_gc(url: str, rows: int, samples: int) -> GcRun:
    t = open_postgres(url, "power", tag="_gc")
    try:
        fill_old(t, rows)
        worker = t.ledger()
        op = _fresh(worker)
        before = timed(op, range(10_000_000, 10_000_000 + samples))
        ctx = mp.get_context("spawn")
        out = ctx.Queue()
        proc = ctx.Process(target=_collect, args=(url, t.schema or "", out))
        proc.start()
        _, started = out.get(timeout=120)
        during, i = [], 20_000_000
        while proc.is_alive() and out.empty():
            during += timed(op, [i])
            i += 1
        _, pruned, commits = out.get(timeout=3600)
        seconds = (commits[-1] if commits else time.monotonic()) - started
        proc.join(timeout=60)
        marks = [started, *commits]
        longest = max(b - a for a, b in itertools.pairwise(marks)) * 1000
        worker.close()
        return GcRun(pruned, seconds, len(commits), longest, before, during)
    finally:
        t.close()


def fill_old(t: Target, rows: int, batch: int = 100_000) -> None:
    """``rows`` succeeded actions, two days old, one transaction per ``batch``."""
    for lo in range(0, rows, batch):
        t.bare.commit(
            "INSERT INTO c4a_effects (key, run_id, tool, kind, state, attempt, args, result, "
            "created_at, updated_at) SELECT encode(sha256(('old-' || i)::bytea), 'hex'), "
            "'run-' || (i / 20), 'agent.send_email', 'write', 'succeeded', 1, "
            """'{"to":"user' || i || '@example.com"}', '{"id":' || i || '}', old, old """
            "FROM generate_series(%s::bigint, %s::bigint) AS s(i), LATERAL (SELECT "
            "extract(epoch FROM clock_timestamp()) - 2 * 86400 + i * 0.001 AS old) AS t",
            (lo, min(lo + batch, rows) - 1),
        )
    t.bare.commit("ANALYZE c4a_effects", ())


def _fresh(ledger: c4a.Ledger) -> Callable[[int], object]:
    def op(i: int) -> object:
        with c4a.run(RUN_ID, ledger=ledger):
            return send(i)

    return op


# -- printing ----------------------------------------------------------------------------------


# -- placement -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Placed:
    where: str
    select: list[int]  # ns per PK select
    repeat: list[int]  # ns per lone repeat


def bench_placement(url: str, n: int, warm: int) -> list[Placed] | str:
    """The lone repeat and its PK select on one session, by where its server process runs; a
    reason instead when that cannot be set here."""
    if not hasattr(os, "sched_setaffinity") or (os.cpu_count() or 1) < 2:
        return "needs Linux and two CPUs"
    t = open_postgres(url, "power", tag="_pin")
    mine = os.sched_getaffinity(0)
    try:
        writer = t.ledger()
        span = warm + n  # each placement warms up on its own ids, then times n more
        runs_chunk(writer, lone_run)(range(2 * span))
        keys = {r.args["i"]: r.key for r in writer.effects() if r.run_id == lone_run(r.args["i"])}
        writer.close()
        view = t.ledger()
        lookup = same_session(view, t.schema or "")
        server = _server_process(view)
        if isinstance(server, str):
            return server
        os.sched_setaffinity(0, {0})
        placed = []
        for k, (where, cpu) in enumerate((("the client's CPU", 0), ("another CPU", 1))):
            try:
                os.sched_setaffinity(server, {cpu})
            except PermissionError:
                return "no right to set the server process's CPU (run as root or its user)"
            cases = {
                "select": runs_chunk(view, lone_run, lambda i: lookup(keys[i])),
                "repeat": runs_chunk(view, lone_run),
            }
            ids = range(k * span + warm, (k + 1) * span)  # runs not met before: each is lone
            samples = interleave(cases, ids, warm, rounds=30)
            placed.append(Placed(where, samples["select"], samples["repeat"]))
        view.close()
        return placed
    finally:
        os.sched_setaffinity(0, mine)
        t.close()


def _server_process(ledger: c4a.Ledger) -> int | str:
    """The pid of the server process behind the ledger's kept connection, if it is on this
    machine (a pid from another host would name some unrelated local process)."""
    driver = kept_driver(ledger)
    if driver.info.host not in (
        "127.0.0.1",
        "::1",
        "localhost",
    ) and not driver.info.host.startswith("/"):
        return f"the server is not on this machine ({driver.info.host})"
    pid = driver.info.backend_pid
    try:
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return "the server's processes are not visible here (another container?)"
    return pid if comm.startswith("postgres") else f"process {pid} is {comm!r}, not the server's"


def print_placement(placed: list[Placed] | str) -> None:
    if isinstance(placed, str):
        print(f"placement: skipped, {placed}")
        return
    print("one session, this process on CPU 0, medians:")
    for p in placed:
        select, repeat = statistics.median(p.select) / 1000, statistics.median(p.repeat) / 1000
        print(
            f"  server process on {p.where + ':':<18} PK select {select:7.1f} µs, lone repeat "
            f"{repeat:7.1f} µs: {repeat / select:.2f}x, {repeat - select:+.0f} µs"
        )


def header(args: argparse.Namespace) -> None:
    import psycopg

    runner = "uv run python" if os.environ.get("UV") else "python"
    print(f"command: {runner} {shlex.join(sys.argv)}")
    print(
        f"python {platform.python_version()}, SQLAlchemy {sqlalchemy.__version__}, psycopg "
        f"{psycopg.__version__}, call4agents {c4a.__version__}, {platform.system()} "
        f"{platform.machine()}, {os.cpu_count()} CPUs"
    )
    with psycopg.connect(args.postgres.replace("+psycopg", "", 1)) as conn:
        version = conn.execute("SHOW server_version").fetchone()
    print(f"PostgreSQL {version[0] if version else '?'} at {args.postgres}")
    print(f"latency: N={args.n} per case; throughput: {args.per_worker} actions per process\n")


def print_rates(rates: Sequence[Rate], workers: int) -> None:
    head = (
        f"{'case':<50} {'1 process /s':>14} {f'{workers} processes /s':>16} {'ratio':>7} "
        f"{'client CPU µs':>14}"
    )
    print(head + "\n" + "-" * len(head))
    names = {
        "floor": FLOOR,
        "fresh": FRESH,
        "select": SELECT_FLOOR,
        "repeat": FROM_DB,
        "floor_provider": FLOOR + WITH_PROVIDER,
        "fresh_provider": FRESH + WITH_PROVIDER,
    }
    for r in rates:
        print(
            f"{names[r.case]:<50} {r.one:>14,.0f} {r.many:>16,.0f} {r.many / r.one:>7.2f} "
            f"{r.cpu_us:>14,.0f}"
        )


def print_gc(run: GcRun) -> None:
    def p(samples: list[int], q: float) -> float:
        ordered = sorted(samples)
        return ordered[int(q * (len(ordered) - 1))] / 1000

    print(
        f"gc of {run.rows:,} actions: {run.seconds:.1f} s ({run.rows / run.seconds:,.0f}/s), "
        f"{run.batches} transactions, the longest {run.longest_batch_ms:.0f} ms"
    )
    before = (
        f"before gc: median {statistics.median(run.before) / 1000:.0f} µs, "
        f"p99 {p(run.before, 0.99):.0f} µs"
    )
    if not run.during:  # a small ledger can be collected before the worker's first action ends
        print(f"a worker's fresh effect: none ended while gc ran ({before})")
        return
    print(
        f"a worker's fresh effect meanwhile: median {statistics.median(run.during) / 1000:.0f} µs"
        f", p99 {p(run.during, 0.99):.0f} µs, {len(run.during)} recorded during gc ({before})"
    )


def verdicts(latency: Sequence[Result], rates: Sequence[Rate], workers: int) -> list[str]:
    def median(case: str, durability: str) -> float:
        found = [r for r in latency if r.case == case and r.durability == durability]
        return found[0].median_us if found else float("nan")

    lines = []
    for durability in ("power", "process"):
        fresh = median(FRESH, durability) / median(FLOOR, durability)
        select = median(SELECT_FLOOR, durability)
        lone, resumed = median(FROM_DB, durability) / select, median(RESUMED, durability) / select
        lines += [
            f"fresh effect / floor ({durability}): {fresh:.2f}x (target <= 1.3x)",
            f"repeat from a new process / PK select ({durability}): lone {lone:.2f}x, "
            f"in a resumed run {resumed:.2f}x (target <= 1.3x)",
        ]
    by_case = {r.case: r for r in rates}
    scale = by_case["fresh"].many / by_case["fresh"].one if "fresh" in by_case else float("nan")
    lines.append(
        f"fresh effects, {workers} processes / 1 process: {scale:.2f}x (target >= 4x; "
        f"{os.cpu_count()} CPUs here)"
    )
    if "fresh_provider" in by_case:
        waiting = by_case["fresh_provider"]
        lines.append(
            f"fresh effects whose tool waits {PROVIDER_SECONDS * 1000:.0f} ms, {workers} processes"
            f" / 1 process: {waiting.many / waiting.one:.2f}x (the ledger does not serialise them)"
        )
    return lines


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a short run with fewer samples")
    parser.add_argument(
        "--postgres",
        default=os.environ.get("CALL4AGENTS_TEST_POSTGRES_URL", DEFAULT_URL),
        metavar="URL",
    )
    parser.add_argument("--n", type=int, help="timed actions per latency case")
    parser.add_argument("--workers", type=int, default=8, help="processes in the crowd")
    parser.add_argument("--per-worker", type=int, help="actions per process in the throughput part")
    parser.add_argument("--gc-rows", type=int, help="ledger size for the retention part")
    parser.add_argument(
        "--parts",
        default="latency,throughput,retention,placement",
        help="which parts to run, comma-separated (default: all four)",
    )
    args = parser.parse_args(argv)
    args.n = args.n or (300 if args.quick else 2000)
    args.warm = min(100, args.n)
    args.per_worker = args.per_worker or (200 if args.quick else 1000)
    args.gc_rows = args.gc_rows or (100_000 if args.quick else 1_000_000)
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    parts = set(args.parts.split(","))
    header(args)
    latency: list[Result] = []
    rates: list[Rate] = []
    if "latency" in parts:
        for durability in ("power", "process"):
            target: Target = open_postgres(args.postgres, durability)
            try:
                latency += bench_target(target, args.n, args.warm)
            finally:
                target.close()
        print_table(latency)
        print()
    if "throughput" in parts:
        rates = bench_throughput(args.postgres, args.workers, args.per_worker)
        print_rates(rates, args.workers)
        print()
    if "retention" in parts:
        print_gc(bench_gc(args.postgres, args.gc_rows, samples=min(args.n, 500)))
        print()
    if "placement" in parts:
        print_placement(bench_placement(args.postgres, args.n, args.warm))
        print()
    for line in verdicts(latency, rates, args.workers):
        if "nan" not in line:  # a part that was not run
            print(line)


if __name__ == "__main__":
    main()
