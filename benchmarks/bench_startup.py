"""Start-up: what a fresh process pays before it does anything, beside a bare interpreter.

    python benchmarks/bench_startup.py [--rounds 15] [--postgres URL]
        [--actions 1000000 --open 1000]

Each case is a new process, started ``--rounds`` times with the cases interleaved (so a busy
moment of the machine falls on all of them alike): ``python -c pass`` (the floor),
``import call4agents`` (what a tool-calling process pays), ``call4agents --help``, and
``call4agents doubt``, ``stats`` and ``runs`` on a SQLite ledger (all open it through
SQLAlchemy, as every command does), beside the import of SQLAlchemy and its SQLite dialect
alone: the least a command on the one route can cost. Wall times from spawn to exit, in
milliseconds, and the CPU time the process used (user + system), which a busy machine inflates
far less than the wall time: on a shared machine it is the steadier figure to compare.

The ledger is empty unless ``--actions`` is given: then it is filled inside the database by
``bench_scale.py``'s fill, ``--open`` actions in doubt, as many started and as many approval
tickets waiting (the reading commands' target: under 300 ms each at 1,000,000 actions with 1,000
in doubt and 1,000 waiting). Before the clock starts, each command runs once in this process
with every statement it sends counted: a count that grows with the ledger (one query per
waiting ticket, say) shows there.

Given a PostgreSQL server (``--postgres``, by default ``$CALL4AGENTS_TEST_POSTGRES_URL``), the
same three commands run on a ledger in a schema of its own, dropped afterwards, beside the
import of psycopg (the driver's own share) and of SQLAlchemy with its psycopg dialect and
psycopg (their floor).
"""

from __future__ import annotations

import argparse
import contextlib
import io
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
IMPORT = [sys.executable, "-c", "import sys; exec('import ' + sys.argv[1])"]
READS = ("doubt", "stats", "runs")  # the reading commands timed on each ledger


def cases(ledger: list[str], postgres: list[str] | None, size: str) -> dict[str, list[str]]:
    """The commands to time; ``ledger`` and ``postgres``: the ``--url`` (and ``--schema``) of
    the SQLite ledger and of a PostgreSQL one, if there is one."""
    found = {
        "python -c pass (floor)": [sys.executable, "-c", "pass"],
        "import call4agents": [sys.executable, "-c", "import call4agents"],
        "call4agents --help": [*CLI, "--help"],
        # What any command on one route loads before it does anything: the command's floor.
        "import sqlalchemy + SQLite dialect": [*IMPORT, "sqlalchemy.dialects.sqlite"],
    }
    for command in READS:
        found[f"call4agents {command} ({size})"] = [*CLI, command, *ledger]
    if postgres:
        found["PG: import psycopg"] = [*IMPORT, "psycopg"]
        found["PG: import sqlalchemy + psycopg dialect"] = [
            *IMPORT,
            "sqlalchemy.dialects.postgresql.psycopg, psycopg",
        ]
        for command in READS:
            found[f"PG: call4agents {command} ({size})"] = [*CLI, command, *postgres]
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
        help="a PostgreSQL URL to time the commands on too (a schema is made and dropped)",
    )
    parser.add_argument("--actions", type=int, default=0, help="fill the ledgers with N actions")
    parser.add_argument(
        "--open", type=int, default=1000, help="with --actions: in doubt, started and waiting"
    )
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.2f}, {os.cpu_count()} CPUs")
    schema = "c4a_bench_" + uuid.uuid4().hex[:8]
    try:
        times, cpus = measure(args, schema)
    finally:
        if args.postgres:
            _drop_schema(args.postgres, schema)
    report(times, cpus, args.rounds)


def measure(
    args: argparse.Namespace, schema: str
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
        ledgers = [["--url", url]]
        if args.postgres:
            ledgers.append(["--url", args.postgres, "--schema", schema])
        for target in ledgers:
            subprocess.run([*CLI, "migrate", *target], env=env, check=True, capture_output=True)
            if args.actions:
                fill(target, args.actions, args.open, env["CALL4AGENTS_SECRET"])
            count_statements(target, env["CALL4AGENTS_SECRET"])
        size = f"{args.actions:,} actions" if args.actions else "empty ledger"
        todo = cases(ledgers[0], ledgers[1] if args.postgres else None, size)
        for argv in todo.values():
            once(argv, env)
        times: dict[str, list[float]] = {name: [] for name in todo}
        cpus: dict[str, list[float]] = {name: [] for name in todo}
        for _ in range(args.rounds):
            for name, argv in todo.items():
                wall, cpu = once(argv, env)
                times[name].append(wall)
                cpus[name].append(cpu)
    return times, cpus


def fill(target: list[str], n: int, open_: int, secret: str) -> None:
    """``n`` actions, ``open_`` of them in doubt, ``open_`` approvals waiting (bench_scale)."""
    sys.path.insert(0, str(Path(__file__).parent))
    os.environ["CALL4AGENTS_SECRET"] = secret
    from bench_scale import fill as fill_ledger

    import call4agents as c4a

    schema = target[3] if len(target) > 2 else None
    ledger = c4a.Ledger(target[1], schema=schema)
    try:
        filled, folded = fill_ledger(ledger, n, open_)
    finally:
        ledger.close()
    print(f"{ledger.dialect}: filled {n:,} actions in {filled:.1f} s, folded in {folded:.1f} s")


def count_statements(target: list[str], secret: str) -> None:
    """Each reading command run once in this process, the statements it sends counted."""
    os.environ["CALL4AGENTS_SECRET"] = secret
    from sqlalchemy import Engine, event

    from call4agents.facade.cli import main as cli

    sent = [0]

    def count(*_: object) -> None:
        sent[0] += 1

    event.listen(Engine, "before_cursor_execute", count)
    try:
        found = []
        for command in READS:
            sent[0] = 0
            with contextlib.redirect_stdout(io.StringIO()):
                code = cli([command, *target])
            assert code == 0, (command, code)
            found.append(f"{command} {sent[0]}")
    finally:
        event.remove(Engine, "before_cursor_execute", count)
    where = "PostgreSQL" if len(target) > 2 else "SQLite"
    print(f"{where}: statements sent: " + ", ".join(found))


def _imports_of(name: str) -> str | None:
    """The case whose CPU time a reading command's is compared with: importing its SQLAlchemy
    dialect (and driver), the part of its start-up that one route cannot go without."""
    if name.startswith("PG: call4agents "):
        return "PG: import sqlalchemy + psycopg dialect"
    if name.startswith("call4agents ") and name.split()[1] in READS:
        return "import sqlalchemy + SQLite dialect"
    return None


def report(times: dict[str, list[float]], cpus: dict[str, list[float]], rounds: int) -> None:
    floor = statistics.median(times["python -c pass (floor)"])
    cpu = {name: statistics.median(samples) for name, samples in cpus.items()}
    print(
        f"\n{'case':<44} {'median ms':>10} {'min ms':>8} {'over floor ms':>14} {'CPU ms':>8}"
        f" {'min CPU':>8} {'CPU over imports':>17}"
    )
    for name, samples in times.items():
        median = statistics.median(samples)
        imports = _imports_of(name)
        beyond = f"{cpu[name] - cpu[imports]:>17.1f}" if imports in cpu else ""
        print(
            f"{name:<44} {median:>10.1f} {min(samples):>8.1f} {median - floor:>14.1f}"
            f" {cpu[name]:>8.1f} {min(cpus[name]):>8.1f} {beyond}"
        )
    print(
        f"\n{rounds} rounds; load average {os.getloadavg()[0]:.2f} at the end; CPU ms: median"
        " user + system time of the process"
    )


if __name__ == "__main__":
    main()
