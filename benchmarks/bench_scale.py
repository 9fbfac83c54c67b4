"""What reading a big ledger costs: doubt, runs, show, stats, approvals and the lease sweep at
1,000 to 1,000,000 actions (10,000,000 with ``--huge``), beside a bare indexed select.

    .venv/bin/python benchmarks/bench_scale.py [--sizes 1000,100000,1000000] [--huge]
        [--postgres URL] [--rounds 5] [--cli-rounds 3] [--no-cli] [--no-trigger]

Each size gets a fresh ledger (a SQLite file; on PostgreSQL a fresh schema, dropped at the end)
whose actions spread over the last 30 days. It is filled inside the database (a recursive CTE on
SQLite, ``generate_series`` on PostgreSQL), not through the API: a million effects through the
API would take an hour and measure the writes.
The fill holds five actions in doubt and five started whatever the size, five approvals waiting
among a tenth as many spent tickets, and five runs ended by escalation, so each read has the
same answer to give at every size; only what it must look through grows. Each run (one per ten
actions) has the counters ``c4a.run`` leaves, which the alert figures of ``stats`` read: those
figures' answer does grow with the ledger.

``in process``: one open ledger, each operation timed ``--rounds`` times, median in ms.
``bare indexed select``: one row of ``c4a_effects`` by key on the same connection kind: the least
any read can cost. ``CLI``: a new ``call4agents`` process per call, wall time, median of
``--cli-rounds``, beside a new process that opens the database and does the bare select.

``filled``/``folded``: the fill, and the first fold of every row it logged (what the first
`stats` after a bulk load costs a ledger of that size).

``tally trigger``: what keeping the figures up to date adds to the hot path: fresh effects
(durability="process") on two ledgers, one with the trigger and one without, interleaved in
rounds, median and mean in µs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, text

import call4agents as c4a
from call4agents.controls import stats
from call4agents.storage import tally

SECRET = "bench-" + "x" * 40
CLI = [
    sys.executable,
    "-c",
    "import sys; from call4agents.facade.cli import main; sys.exit(main())",
]
SPAN = 30 * 86400.0  # the actions' times spread over the last 30 days, at every size
OPEN = 5  # actions in doubt, actions started, approvals waiting, ended runs: at every size


def fill_sql(dialect: str, n: int, t0: float, step: float, open_: int = OPEN) -> list[str]:
    """Statements that fill a migrated ledger with ``n`` actions, inside the database:
    ``open_`` of them in doubt, as many started and as many approvals waiting."""
    every = max(n // open_, 1)

    def txt(expr: str) -> str:
        return f"({expr})::text" if dialect == "postgresql" else f"CAST({expr} AS TEXT)"

    if dialect == "postgresql":
        series = f"FROM generate_series(0, {n - 1}) AS s(i)"
        key = "lpad(i::text, 64, '0')"
        ticket_series = f"FROM generate_series(0, {max(n // 10, open_) - 1}) AS s(i)"
        float_of = "i::float8"
    else:
        series = f"FROM (WITH RECURSIVE s(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM s WHERE i < {n - 1}) SELECT i FROM s)"  # noqa: E501
        key = "printf('%064d', i)"
        m = max(n // 10, open_) - 1
        ticket_series = f"FROM (WITH RECURSIVE s(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM s WHERE i < {m}) SELECT i FROM s)"  # noqa: E501
        float_of = "CAST(i AS REAL)"
    tickets = max(n // 10, open_)
    runs = max(n // 10, 1)
    run_series = (
        f"FROM generate_series(0, {runs - 1}) AS s(i)"
        if dialect == "postgresql"
        else f"FROM (WITH RECURSIVE s(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM s "
        f"WHERE i < {runs - 1}) SELECT i FROM s)"
    )
    # What `c4a.run` leaves for each run (see run_notes): entered, calls and reads, a trigger,
    # and for three in four runs a completion; and a budget's cost, a thousand values apart.
    # The alert figures of `stats` read these.
    counters = [
        ("run.entered_at", f"{t0} + {float_of} * {step * 10}", ""),
        ("run.tool_calls", "i % 40", ""),
        ("cost", "(i % 997) / 100.0", ""),
        ("run.reads", "i % 3", ""),
        ("run.trigger:user", f"{t0}", ""),
        ("run.completed_at", f"{t0} + {float_of} * {step * 10} + 1", " WHERE i % 4 <> 0"),
    ]
    state = (
        f"CASE WHEN i % {every} = 1 THEN 'in_doubt' WHEN i % {every} = 2 THEN 'started' "
        "WHEN i % 50 = 3 THEN 'failed' ELSE 'succeeded' END"
    )
    return [
        "INSERT INTO c4a_effects (key, run_id, tool, kind, state, attempt, lease_expires_at, "
        "args, result, created_at, updated_at) "
        f"SELECT {key}, 'run-' || {txt('i / 10')}, 'tool-' || {txt('i % 7')}, "
        "CASE WHEN i % 13 = 0 THEN 'irreversible' ELSE 'write' END, "
        f"{state}, CASE WHEN i % 31 = 0 THEN 2 ELSE 1 END, "
        f"CASE WHEN i % {every} = 2 THEN {t0 + 1e7} END, '{{}}', '1', "
        f"{t0} + {float_of} * {step}, {t0} + {float_of} * {step} {series}",
        "INSERT INTO c4a_approvals (ticket, key, for_attempt, run_id, tool, args, state, "
        "requested_at, expires_at, signature) "
        f"SELECT 't' || {txt('i')}, {key}, 1, 'run-' || {txt('i')}, 'tool-1', '{{}}', "
        f"CASE WHEN i % {max(tickets // open_, 1)} = 0 THEN 'pending' ELSE 'spent' END, "
        f"{t0} + {float_of}, {t0 + 1e7}, 'x' {ticket_series}",
        "INSERT INTO c4a_runs (run_id, status, reason, created_at, updated_at) "
        f"SELECT 'run-' || {txt(f'i * {max(n // 10 // OPEN, 1)}')}, "
        f"'escalated', 'bench', {t0}, {t0} "
        + (
            f"FROM generate_series(0, {OPEN - 1}) AS s(i)"
            if dialect == "postgresql"
            else f"FROM (WITH RECURSIVE s(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM s "
            f"WHERE i < {OPEN - 1}) SELECT i FROM s)"
        ),
        *(
            "INSERT INTO c4a_run_counters (run_id, name, value) "
            f"SELECT 'run-' || {txt('i')}, '{name}', {value} {run_series}{where}"
            for name, value, where in counters
        ),
    ]


def fill(ledger: c4a.Ledger, n: int, open_: int = OPEN) -> tuple[float, float]:
    """Fill the ledger (``open_``: see fill_sql) with the tally triggers off, logging every row
    for the tallies afterwards; then fold the log, as the first `stats` after such a load does.
    Seconds each."""
    start = time.perf_counter()
    step = SPAN / n
    t0 = time.time() - SPAN
    with ledger.engine.begin() as conn:
        if ledger.schema:  # the statements name tables bare
            conn.execute(text(f'SET LOCAL search_path TO "{ledger.schema}"'))
        tally.drop_triggers(conn)  # the log below holds each bulk row once
        for statement in fill_sql(ledger.dialect, n, t0, step, open_):
            conn.execute(text(statement))
        tally.log_everything(conn)
        tally.create_triggers(conn)
    filled = time.perf_counter() - start
    tally.after_folding(ledger.store, lambda conn: None)
    folded = time.perf_counter() - start - filled
    analyze(ledger, "effects", "approvals", "runs", "run_tallies", "run_counters", "tallies")
    return filled, folded


def analyze(ledger: c4a.Ledger, *tables: str) -> None:
    """Fresh statistics for the planners; on PostgreSQL also the change log's deleted rows
    cleared, as autovacuum soon does after a fold this size (until then each fold, even of
    nothing, walks past them: a few milliseconds)."""
    if ledger.dialect == "sqlite":
        with ledger.engine.begin() as conn:
            conn.exec_driver_sql("ANALYZE")
        return
    with ledger.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        for table in tables:
            conn.execute(text(f'ANALYZE "{ledger.schema}".c4a_{table}'))
        conn.execute(text(f'VACUUM ANALYZE "{ledger.schema}".c4a_changes'))


def median_ms(work: Callable[[], Any], rounds: int) -> float:
    work()  # warm: the first call opens connections
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        work()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def in_process(ledger: c4a.Ledger, n: int, rounds: int) -> dict[str, float]:
    run = f"run-{n // 20}"
    key = f"{n // 2:064d}"
    table = f'"{ledger.schema}".c4a_effects' if ledger.schema else "c4a_effects"
    bare = text(f"SELECT result FROM {table} WHERE key = :k")

    def bare_select() -> None:
        with ledger.engine.connect() as conn:
            conn.execute(bare, {"k": key}).all()

    def show() -> None:
        ledger.effects(run)
        ledger.approvals(run, state="pending")
        ledger.run_status(run)

    ops: dict[str, Callable[[], Any]] = {
        "bare indexed select": bare_select,
        "doubt": ledger.in_doubt,
        "runs": lambda: ledger.runs(limit=100),
        "show": show,
        "stats": lambda: stats.compute(ledger),
        "stats --since 1h": lambda: stats.compute(ledger, 3600),
        # The second part of `stats`: from the tallies (see docs/speed.md).
        "alert figures": lambda: stats.alert_figures(ledger, stats.compute(ledger)),
        "approvals": lambda: ledger.approvals(state="pending"),
        "sweep": ledger.sweep,
    }
    return {name: median_ms(op, rounds) for name, op in ops.items()}


def through_cli(target: list[str], n: int, rounds: int, env: dict[str, str]) -> dict[str, float]:
    url, schema = target[1], (target[3] if len(target) > 2 else None)
    key = f"{n // 2:064d}"
    if schema:
        dsn = url.replace("postgresql+psycopg", "postgresql")
        bare = (
            f"import psycopg; c = psycopg.connect({dsn!r}); c.execute("
            f"'SELECT result FROM \"{schema}\".c4a_effects WHERE key = %s', ({key!r},)).fetchall()"
        )
    else:
        path = url.removeprefix("sqlite:///")
        bare = (
            f"import sqlite3; c = sqlite3.connect({path!r}); c.execute("
            f"'SELECT result FROM c4a_effects WHERE key = ?', ({key!r},)).fetchall()"
        )
    commands = {
        "bare indexed select": [sys.executable, "-c", bare],
        "doubt": [*CLI, "doubt", *target],
        "runs": [*CLI, "runs", *target],
        "show": [*CLI, "show", f"run-{n // 20}", *target],
        "stats": [*CLI, "stats", *target],
        "approvals": [*CLI, "approvals", *target],
    }
    found: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(rounds):  # interleaved, so a busy moment falls on every command alike
        for name, argv in commands.items():
            start = time.perf_counter()
            subprocess.run(argv, env=env, check=True, capture_output=True)
            found[name].append((time.perf_counter() - start) * 1000)
    return {name: statistics.median(times) for name, times in found.items()}


def trigger_cost(
    url: str, schema: str | None, n: int, rounds: int
) -> dict[str, tuple[float, float]]:
    """Fresh effects with and without the tally trigger, interleaved: (median, mean) µs."""
    ledgers = {
        name: c4a.Ledger(
            url.replace(".db", f"-{suffix}.db") if schema is None else url,
            schema=None if schema is None else f"{schema}_{suffix}",
            durability="process",
        )
        for name, suffix in (("with trigger", "on"), ("without trigger", "off"))
    }
    with ledgers["without trigger"].engine.begin() as conn:
        tally.drop_triggers(conn)
    times: dict[str, list[float]] = {name: [] for name in ledgers}
    for r in range(rounds + 1):  # the first round warms up
        for name, ledger in ledgers.items():
            tool = c4a.effect(name="t", ledger=ledger)(lambda i: i)
            with c4a.run(f"trig-{r}"):
                for i in range(n):
                    start = time.perf_counter_ns()
                    tool(i)
                    if r:
                        times[name].append((time.perf_counter_ns() - start) / 1000)
    for ledger in ledgers.values():
        ledger.close()
    return {k: (statistics.median(v), statistics.fmean(v)) for k, v in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="1000,100000,1000000")
    parser.add_argument("--huge", action="store_true", help="add 10,000,000 actions")
    parser.add_argument("--postgres", default=os.environ.get("CALL4AGENTS_TEST_POSTGRES_URL"))
    parser.add_argument("--no-sqlite", action="store_true")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--cli-rounds", type=int, default=3)
    parser.add_argument("--no-cli", action="store_true")
    parser.add_argument("--no-trigger", action="store_true")
    parser.add_argument("--trigger-n", type=int, default=300)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")] + ([10_000_000] if args.huge else [])
    os.environ["CALL4AGENTS_SECRET"] = SECRET
    env = dict(os.environ)
    # A new process starts from compiled bytecode, as an installed package does; without it each
    # CLI call compiles SQLAlchemy from source, and that is what would be measured.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    print("command: " + " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]))
    print(f"load average before: {os.getloadavg()[0]:.2f}, {os.cpu_count()} CPUs")
    backends = ([] if args.no_sqlite else ["sqlite"]) + (["postgresql"] if args.postgres else [])
    with tempfile.TemporaryDirectory(prefix="c4a-scale-") as folder:
        for backend in backends:
            for n in sizes:
                measure(backend, n, args, Path(folder), env)
            if not args.no_trigger:
                report_trigger(backend, args, Path(folder))
    print(f"load average after: {os.getloadavg()[0]:.2f}")


def measure(
    backend: str, n: int, args: argparse.Namespace, folder: Path, env: dict[str, str]
) -> None:
    schema = None if backend == "sqlite" else "c4a_scale_" + uuid.uuid4().hex[:10]
    url = f"sqlite:///{folder / f'scale-{n}.db'}" if backend == "sqlite" else args.postgres
    ledger = c4a.Ledger(url, schema=schema)
    try:
        filled, folded = fill(ledger, n)
        found = in_process(ledger, n, args.rounds)
        ledger.close()
        target = ["--url", url, *(["--schema", schema] if schema else [])]
        cli = {} if args.no_cli else through_cli(target, n, args.cli_rounds, env)
        print(f"\n{backend}, {n:,} actions (filled in {filled:.1f} s, folded in {folded:.1f} s)")
        print(f"  {'operation':<22} {'in process ms':>14} {'CLI ms':>9}")
        for name, ms in found.items():
            via = f"{cli[name]:9.1f}" if name in cli else " " * 9
            print(f"  {name:<22} {ms:14.2f} {via}")
    finally:
        ledger.close()
        if schema:
            drop_schemas(url, [schema])
        elif backend == "sqlite":
            Path(url.removeprefix("sqlite:///")).unlink(missing_ok=True)


def report_trigger(backend: str, args: argparse.Namespace, folder: Path) -> None:
    schema = None if backend == "sqlite" else "c4a_trig_" + uuid.uuid4().hex[:10]
    url = f"sqlite:///{folder / 'trig.db'}" if backend == "sqlite" else args.postgres
    try:
        found = trigger_cost(url, schema, args.trigger_n, max(args.rounds, 2))
    finally:
        if schema:
            drop_schemas(url, [f"{schema}_on", f"{schema}_off"])
    print(f"\n{backend}: fresh effect (durability='process'), {args.trigger_n} per round")
    for name, (median, mean) in found.items():
        print(f"  {name:<18} median {median:8.1f} µs   mean {mean:8.1f} µs")


def drop_schemas(url: str, schemas: list[str]) -> None:
    engine = create_engine(url)
    with engine.begin() as conn:
        for schema in schemas:
            conn.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
    engine.dispose()


if __name__ == "__main__":
    main()
