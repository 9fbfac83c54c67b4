"""The benchmark scripts still run, every part of them, on tiny samples.

Nothing here judges a figure (this machine is shared and noisy; the README's figures come from
full runs): it keeps the scripts that make those figures from rotting as the library changes.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import PG_ENV, postgres_url
from tests.postgres.helpers import unavailable

BENCHMARKS = Path(__file__).parents[1] / "benchmarks"


def bench(script: str, *args: str, postgres: str | None = None) -> str:
    env = {k: v for k, v in os.environ.items() if k != PG_ENV}  # SQLite unless told
    if postgres:
        env[PG_ENV] = postgres
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), *args],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_bench_core_on_sqlite() -> None:
    out = bench("bench_core.py", "--n", "20")
    cases = ("floor (2 commits)", "fresh effect (async)", "repeat, new process: lone", "empty run")
    for case in (*cases, "run of one fresh effect"):
        assert case in out
    assert "x floor (median/mean)" in out
    assert "postgresql" not in out


def test_trace_path() -> None:
    out = bench("trace_path.py", "--list")
    assert "files:" in out
    assert "functions:" in out
    assert "storage/store.py" in out  # the claim and the outcome were traced


def test_bench_startup() -> None:
    out = bench("bench_startup.py", "--rounds", "1")
    for case in ("python -c pass (floor)", "import call4agents", "call4agents doubt"):
        assert case in out


def test_bench_console() -> None:
    out = bench(
        "bench_console.py", "--tickets", "5", "--actions", "200", "--audit", "50", "--rounds", "1"
    )
    for case in ("floor: the bare read", "/doubt", "/runs", "/run?id=bulk-1", "/audit", "/health"):
        assert case in out
    assert "target 300 ms a page" in out


def test_bench_scale_on_sqlite() -> None:
    out = bench(
        "bench_scale.py", "--sizes", "200", "--rounds", "1", "--cli-rounds", "1", "--trigger-n", "5"
    )
    for case in ("bare indexed select", "doubt", "runs", "show", "stats", "approvals", "sweep"):
        assert f"  {case} " in out
    assert "sqlite, 200 actions" in out
    assert "without trigger" in out


@pytest.mark.slow
@pytest.mark.postgres
def test_bench_scale_on_postgres() -> None:
    out = bench(
        "bench_scale.py",
        *("--sizes", "200", "--rounds", "1", "--cli-rounds", "1", "--trigger-n", "5"),
        *("--no-sqlite", "--postgres", postgres_url()),
    )
    assert "postgresql, 200 actions" in out
    assert "without trigger" in out


def test_bench_otel() -> None:
    out = bench("bench_otel.py", "--n", "40", "--rounds", "2")
    assert "repeat (same process) added (median)" in out
    assert "per-step span median" in out
    assert "Agents SDK step hooks median" in out
    assert "empty call (floor) median" in out


@pytest.mark.slow
def test_bench_postgres_every_part() -> None:
    url = postgres_url()
    out = bench(
        "bench_postgres.py",
        *("--n", "20", "--workers", "2", "--per-worker", "20", "--gc-rows", "2000"),
        postgres=url,
    )
    for line in (
        "repeat, new process: lone",  # latency
        "client CPU µs",  # throughput
        "gc of 2,000",  # retention
        "fresh effect / floor (power)",  # the verdicts
    ):
        assert line in out, out
    assert "server process on another CPU" in out or "placement: skipped" in out  # placement


@pytest.mark.slow
def test_bench_pooler() -> None:
    """Its own PgBouncer in front of the test server, every case, and the split by cause."""
    url = postgres_url()
    if shutil.which("pgbouncer") is None and not Path("/usr/sbin/pgbouncer").exists():
        unavailable("bench_pooler needs PgBouncer (Debian: apt-get install pgbouncer)")
    out = bench("bench_pooler.py", "--n", "20", "--durability", "process", postgres=url)
    for case in (
        "round trip (SELECT 1), pooled",
        "floor through the pooler",
        "fresh effect (sync), no prepare",
        "fresh effect (sync), pooled",
        "parsing and planning unprepared statements",
    ):
        assert case in out, out


@pytest.mark.slow
def test_bench_failover() -> None:
    """A primary and a standby of its own, the primary's machine killed under load, the standby
    promoted, every call repeated: one short round, figures not judged."""
    bench_failover = BENCHMARKS / "bench_failover.py"
    if not list(Path("/usr/lib/postgresql").glob("*/bin/pg_basebackup")):
        unavailable("bench_failover needs PostgreSQL's server programs (initdb, pg_basebackup)")
    out = bench(bench_failover.name, "--rounds", "1", "--workers", "2", "--seconds", "0.5")
    assert "asynchronous replication" in out
    row = out.strip().splitlines()[-1].split()
    assert row[0] == "1"
    assert int(row[1]) > 0  # results were acknowledged
