"""Many worker processes on one PostgreSQL ledger: one execution each, waiting, dead workers."""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
from collections import Counter
from pathlib import Path

from tests.conftest import Target
from tests.postgres.helpers import deliveries, report, spawn, unavailable, wait_for


def test_sixteen_processes_two_hundred_keys_one_execution_each(
    pg_target: Target, tmp_path: Path
) -> None:
    pg_target.open().close()  # the deployment's migrate step
    outbox, gate = tmp_path / "outbox.jsonl", tmp_path / "go"
    keys = [f"user{i}@example.com" for i in range(200)]
    procs = [
        spawn(pg_target, "fleet", outbox, random.sample(keys, len(keys)), GATE=str(gate))
        for _ in range(16)
    ]
    gate.touch()  # all sixteen start together
    reports = [report(p, timeout=240) for p in procs]

    assert [r["code"] for r in reports] == [0] * 16, [r["stderr"] for r in reports]
    assert [r["errors"] for r in reports] == [{}] * 16
    assert Counter(d["to"] for d in deliveries(outbox)) == Counter(keys)  # each exactly once
    # Every worker got the same recorded result for every key, whichever worker ran it.
    first = reports[0]["results"]
    assert all(r["results"] == first for r in reports)
    assert {r["attempt"] for r in first.values()} == {1}


def test_long_call_with_workers_arriving_mid_call(pg_target: Target, tmp_path: Path) -> None:
    pg_target.open().close()
    outbox, started = tmp_path / "outbox.jsonl", tmp_path / "started"
    key = ["bob@example.com"]
    # A 10 s tool on a 2 s lease: only the heartbeat keeps it alive.
    owner = spawn(
        pg_target, "long", outbox, key, TOOL_SECONDS="10", LEASE="2", STARTED=str(started)
    )
    wait_for(started, owner)
    waiters = [
        spawn(pg_target, "long", outbox, key, LEASE="2", WAIT="60", COUNT_READS="1")
        for _ in range(3)
    ]
    first, *others = [report(p) for p in [owner, *waiters]]

    assert first["code"] == 0, first["stderr"]
    assert [r["code"] for r in others] == [0, 0, 0], [r["stderr"] for r in others]
    assert all(r["results"] == first["results"] for r in others)
    assert len(deliveries(outbox)) == 1
    # Woken by the outcome instead of polling: a waiter reads the row at its arrival, when it
    # is promised a wake-up, at each end of the (renewed) lease and once woken. Polling every
    # quarter second would have read it about forty times.
    assert all(r["reads"] <= 16 for r in others), [r["reads"] for r in others]
    record = pg_target.open().effects("long")[0]
    assert (record.state, record.attempt, record.evidence) == ("succeeded", 1, [])


def _other_host_prefix() -> list[str]:
    """Run a child under another host name (a new UTS namespace), or skip saying why."""
    unshare = shutil.which("unshare")
    if unshare is None:
        unavailable("needs util-linux unshare to run a worker under another host name")
    probe = subprocess.run([unshare, "--uts", "true"], capture_output=True, check=False)
    if probe.returncode != 0:
        unavailable(f"cannot make a UTS namespace here (needs root): {probe.stderr.decode()}")
    return [unshare, "--uts", "sh", "-c", 'hostname c4a-other-host && exec "$@"', "sh"]


def test_worker_killed_mid_call_is_in_doubt_once_its_lease_expires(
    pg_target: Target, tmp_path: Path
) -> None:
    """Seen from another machine, a dead worker is known only by its lease running out."""
    elsewhere = _other_host_prefix()
    pg_target.open().close()
    outbox, started = tmp_path / "outbox.jsonl", tmp_path / "started"
    key = ["bob@example.com"]
    victim = spawn(
        pg_target, "kill", outbox, key, TOOL_SECONDS="60", LEASE="2", STARTED=str(started)
    )
    wait_for(started, victim)
    os.kill(victim.pid, signal.SIGKILL)
    victim.communicate()

    other = report(spawn(pg_target, "kill", outbox, key, WAIT="60", prefix=elsewhere))
    assert other["code"] == 1, other["stderr"]
    [error] = other["errors"].values()
    assert error.startswith("EffectInDoubt:")
    assert "its lease expired with no result" in error
    assert deliveries(outbox) == []  # killed before it delivered, and never run again
    [record] = pg_target.open().in_doubt()
    assert (record.run_id, record.attempt) == ("kill", 1)
