"""One clock: leases are judged by the database server's clock, whatever the workers' clocks say.

The workers run under libfaketime with their wall clocks minutes off the server's (their
monotonic clocks are left alone). Judged by a fast local clock a live lease would look long
expired (stolen early); judged by a slow one a dead lease would look live for minutes (kept late).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import call4agents as c4a
from tests.conftest import Target
from tests.postgres.helpers import deliveries, report, spawn, unavailable, wait_for

LIBFAKETIME = [
    "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/faketime/libfaketime.so.1",
    "/usr/local/lib/faketime/libfaketime.so.1",
]


def skewed(minutes: int) -> dict[str, str]:
    """Environment that sets a worker's wall clock ``minutes`` off, or skip saying why."""
    found = next((p for p in LIBFAKETIME if Path(p).exists()), None)
    if found is None:
        unavailable("libfaketime is not installed (apt-get install -y faketime)")
    return {
        "LD_PRELOAD": found,
        "FAKETIME": f"{minutes:+d}m",
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
        "DONT_FAKE_MONOTONIC": "1",  # the name before libfaketime 0.9.8
    }


def assert_skewed(worker: dict[str, object], minutes: int) -> None:
    """The worker's clock really was off by about ``minutes``, or the test proves nothing."""
    skew = float(worker["local_clock"]) - float(worker["db_clock"])  # type: ignore[arg-type]
    assert abs(skew - minutes * 60) < 30, skew


def test_live_lease_is_not_stolen_by_a_fast_clock(pg_target: Target, tmp_path: Path) -> None:
    pg_target.open().close()
    outbox, started = tmp_path / "outbox.jsonl", tmp_path / "started"
    key = ["bob@example.com"]
    slow = spawn(
        pg_target,
        "skew",
        outbox,
        key,
        TOOL_SECONDS="4",
        LEASE="2",
        STARTED=str(started),
        **skewed(-5),
    )
    wait_for(started, slow)
    # Five minutes ahead, this worker would find a 2 s lease long lapsed by its own clock.
    fast = report(spawn(pg_target, "skew", outbox, key, LEASE="2", WAIT="60", **skewed(+5)))
    owner = report(slow)

    assert owner["code"] == 0, owner["stderr"]
    assert fast["code"] == 0, fast["stderr"] + str(fast.get("errors"))
    assert fast["results"] == owner["results"]  # it waited for the result, not judged doubt
    assert len(deliveries(outbox)) == 1
    assert_skewed(owner, -5)
    assert_skewed(fast, +5)
    [record] = pg_target.open().effects("skew")
    assert (record.state, record.attempt, record.evidence) == ("succeeded", 1, [])


def test_lapsed_lease_is_not_kept_by_a_slow_clock(pg_target: Target, tmp_path: Path) -> None:
    pg_target.open().close()
    outbox, started = tmp_path / "outbox.jsonl", tmp_path / "started"
    key = ["bob@example.com"]
    frozen = spawn(
        pg_target,
        "skew",
        outbox,
        key,
        TOOL_SECONDS="2",
        LEASE="1",
        STARTED=str(started),
        OWNER_HOST="elsewhere",  # a stopped worker of this machine is alive: never doubted
        **skewed(+5),
    )
    wait_for(started, frozen)
    os.kill(frozen.pid, signal.SIGSTOP)  # alive but silent: no heartbeat renews its lease
    try:
        # Five minutes behind, this worker would think the lease live for five more minutes
        # and, with a one-minute wait, give up with EffectInProgress.
        slow = report(spawn(pg_target, "skew", outbox, key, WAIT="60", **skewed(-5)))
    finally:
        os.kill(frozen.pid, signal.SIGCONT)
    owner = report(frozen)

    assert slow["code"] == 1, slow["stderr"]
    [error] = slow["errors"].values()
    assert error.startswith("EffectInDoubt:"), error
    assert "lease expired" in error
    assert_skewed(slow, -5)
    assert owner["code"] == 0, owner["stderr"]
    assert_skewed(owner, +5)
    # Its late result then settles the doubt: it is what really happened.
    [record] = pg_target.open().effects("skew")
    assert (record.state, record.attempt) == ("succeeded", 1)
    assert len(deliveries(outbox)) == 1


# -- the secret rotation window is judged by the server's clock too ---------------------------

ROTATED_WORKER = """
import json, os, sys, time
import call4agents as c4a
ledger = c4a.Ledger(os.environ["C4A_TEST_URL"], schema=os.environ["C4A_TEST_SCHEMA"],
                    secret=sys.argv[1], previous_secrets=[(sys.argv[2], float(sys.argv[3]))])

@c4a.effect(name="wire", approval=True, ledger=ledger)
def wire(amount: int) -> str:
    return f"wired {amount}"

with c4a.run("rotation", ledger=ledger):
    try:
        outcome = wire(5)
    except c4a.ApprovalRequired as exc:
        outcome = "refused: " + str(exc)
print(json.dumps({"outcome": outcome, "local_clock": time.time(), "db_clock": ledger.store.now()}))
"""


def _approved_with(pg_target: Target, secret: str) -> None:
    """A yes for wire(5), signed with ``secret`` (the one about to be rotated out)."""
    ledger = pg_target.open(secret=secret)

    @c4a.effect(name="wire", approval=True, ledger=ledger)
    def wire(amount: int) -> str:
        raise AssertionError("asked only, never run here")

    with c4a.run("rotation", ledger=ledger), pytest.raises(c4a.ApprovalRequired) as asked:
        wire(5)
    assert asked.value.request is not None
    ledger.approve(asked.value.request.ticket, by="ann")


@pytest.mark.parametrize(
    ("minutes", "until_from_now", "accepted"),
    [
        (+120, 3600, True),  # retired by the worker's fast clock, still valid by the server's
        (-120, -3600, False),  # still valid by the worker's slow clock, retired by the server's
    ],
)
def test_a_rotated_out_secret_expires_by_the_servers_clock(
    pg_target: Target, tmp_path: Path, minutes: int, until_from_now: int, accepted: bool
) -> None:
    old, new = "old-secret-" + "a" * 40, "new-secret-" + "b" * 40
    _approved_with(pg_target, old)
    until = pg_target.open().store.now() + until_from_now
    script = tmp_path / "rotated.py"
    script.write_text(ROTATED_WORKER)
    done = subprocess.run(
        [sys.executable, str(script), new, old, str(until)],
        env=dict(pg_target.env(), **skewed(minutes)),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    worker = json.loads(done.stdout.strip().splitlines()[-1])
    assert_skewed(worker, minutes)
    if accepted:
        assert worker["outcome"] == "wired 5"
    else:
        assert worker["outcome"].startswith("refused: "), worker["outcome"]
        assert "signature" in worker["outcome"]
