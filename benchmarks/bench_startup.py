"""Start-up: what a fresh process pays before it does anything, beside a bare interpreter.

    python benchmarks/bench_startup.py [--rounds 15] [--postgres URL]

Each case is a new process, started ``--rounds`` times with the cases interleaved (so a busy
moment of the machine falls on all of them alike): ``python -c pass`` (the floor),
``import call4agents`` (what a tool-calling process pays), ``call4agents --help``,
``call4agents doubt`` and ``call4agents runs`` on an empty SQLite ledger (both open it through
SQLAlchemy, as every command does). Wall times from spawn to exit, in milliseconds, and
the CPU time the process used (user + system), which a busy machine inflates far less than the
wall time: on a shared machine it is the steadier figure to compare.

Given a PostgreSQL server (``--postgres``, by default ``$CALL4AGENTS_TEST_POSTGRES_URL``), three
more cases run on an empty ledger in a schema of its own, dropped afterwards: ``python -c
"import psycopg"`` (the driver's own share), ``call4agents doubt`` and ``call4agents runs``.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

CLI = [
    sys.executable,
    "-c",
    "import sys; from call4agents.facade.cli import main; sys.exit(main())",
]


def cases(ledger_url: str, postgres: list[str] | None) -> dict[str, list[str]]:
    """The commands to time; ``postgres``: the ``--url`` and ``--schema`` of a PostgreSQL
    ledger, if there is one."""
    found = {
        "python -c pass (floor)": [sys.executable, "-c", "pass"],
        "import call4agents": [sys.executable, "-c", "import call4agents"],
        "call4agents --help": [*CLI, "--help"],
        "call4agents doubt (empty ledger)": [*CLI, "doubt", "--url", ledger_url],
        "call4agents runs (empty ledger)": [*CLI, "runs", "--url", ledger_url],
    }
    if postgres:
        found["PG: import psycopg"] = [sys.executable, "-c", "import psycopg"]
        found["PG: call4agents doubt (empty)"] = [*CLI, "doubt", *postgres]
        found["PG: call4agents runs (empty)"] = [*CLI, "runs", *postgres]
    return found


def _drop_schema(url: str, schema: str) -> None:
    import psycopg

    plain = url.replace("postgresql+psycopg://", "postgresql://", 1)
    with psycopg.connect(plain, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def _children_cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def once(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU milliseconds of one process (children run one at a time, so the growth of
    the children's CPU time is this one's)."""
    cpu, start = _children_cpu(), time.perf_counter()
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return (time.perf_counter() - start) * 1000, (_children_cpu() - cpu) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument(
        "--postgres",
        default=os.environ.get("CALL4AGENTS_TEST_POSTGRES_URL"),
        help="a PostgreSQL URL to time `doubt` on too (an empty schema is made and dropped)",
    )
    args = parser.parse_args()
    schema = "c4a_bench_" + uuid.uuid4().hex[:8]
    try:
        times, cpus = measure(args.rounds, args.postgres, schema)
    finally:
        if args.postgres:
            _drop_schema(args.postgres, schema)
    report(times, cpus, args.rounds)


def measure(
    rounds: int, postgres: str | None, schema: str
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Wall and CPU milliseconds of each case, ``rounds`` times, the cases interleaved."""
    with tempfile.TemporaryDirectory() as folder:
        url = f"sqlite:///{Path(folder) / 'ledger.db'}"
        env = dict(os.environ, CALL4AGENTS_SECRET="bench-" + "x" * 40)
        # An installed package starts from its compiled bytecode (pip writes it at install
        # time). Without it every process compiles SQLAlchemy from source, seconds under load,
        # and that is what gets measured: so bytecode may be written, and one untimed round
        # writes it before the clock starts.
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        subprocess.run([*CLI, "migrate", "--url", url], env=env, check=True, capture_output=True)
        pg = ["--url", postgres, "--schema", schema] if postgres else None
        if pg:
            subprocess.run([*CLI, "migrate", *pg], env=env, check=True, capture_output=True)
        todo = cases(url, pg)
        for argv in todo.values():
            once(argv, env)
        times: dict[str, list[float]] = {name: [] for name in todo}
        cpus: dict[str, list[float]] = {name: [] for name in todo}
        for _ in range(rounds):
            for name, argv in todo.items():
                wall, cpu = once(argv, env)
                times[name].append(wall)
                cpus[name].append(cpu)
    return times, cpus


def report(times: dict[str, list[float]], cpus: dict[str, list[float]], rounds: int) -> None:
    floor = statistics.median(times["python -c pass (floor)"])
    print(
        f"{'case':<34} {'median ms':>10} {'mean ms':>10} {'min ms':>8} {'over floor ms':>14}"
        f" {'CPU ms':>8}"
    )
    for name, samples in times.items():
        median = statistics.median(samples)
        print(
            f"{name:<34} {median:>10.1f} {statistics.fmean(samples):>10.1f} "
            f"{min(samples):>8.1f} {median - floor:>14.1f} {statistics.median(cpus[name]):>8.1f}"
        )
    print(
        f"\n{rounds} rounds; load average {os.getloadavg()[0]:.2f} at the end; CPU ms: median"
        " user + system time of the process"
    )


if __name__ == "__main__":
    main()
