"""Leases judged by the database clock; late results; dead owners and reused process ids."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import call4agents as c4a
from call4agents.engine import _owner
from tests.conftest import Target
from tests.postgres.helpers import unavailable

CHILD = Path(__file__).with_name("agent_child.py")


def start_paused_worker(
    target: Target, outbox: Path, *, host: str | None = "elsewhere"
) -> tuple[subprocess.Popen[str], str]:
    """A worker that claims the action, then is frozen with SIGSTOP mid-tool (no heartbeat),
    before it delivers; its leases name ``host`` (None: this machine)."""
    proc = subprocess.Popen(
        [sys.executable, str(CHILD), "none", "late", str(outbox)],
        env=dict(
            target.env(), TOOL_SECONDS="1.5", LEASE="0.6", **({"OWNER_HOST": host} if host else {})
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    ledger = target.open()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        started = [r for r in ledger.effects("late") if r.state == "started"]
        if started:
            os.kill(proc.pid, signal.SIGSTOP)
            return proc, started[0].key
        time.sleep(0.01)
    proc.kill()
    pytest.fail("the worker never started its action")


def lapsed(ledger: c4a.Ledger, key: str) -> None:
    """Until the action's lease has lapsed, by the database's clock."""
    deadline = time.monotonic() + 30
    while (row := ledger.store.get(key)) is not None and row.lease_live:
        assert time.monotonic() < deadline, "the lease never lapsed"
        time.sleep(0.05)


def sent(outbox: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in outbox.read_text().splitlines()] if outbox.exists() else []


def test_a_stopped_owner_on_this_machine_is_never_taken_over(
    target: Target, tmp_path: Path
) -> None:
    # Stopped past its lease before it acts: alive, so it may still act; a check= that finds
    # nothing must not make a second attempt run beside it.
    outbox = tmp_path / "outbox.jsonl"
    proc, key = start_paused_worker(target, outbox, host=None)
    ledger = target.open(wait=1.0)
    checked: list[str] = []

    def nothing_there(to: str) -> c4a.DidNotHappen:
        checked.append(to)
        return c4a.DidNotHappen()

    @c4a.effect(name="send_email", ledger=ledger, check=nothing_there)
    def send_email(to: str) -> dict[str, Any]:
        raise AssertionError("ran beside an owner that is alive")

    try:
        lapsed(ledger, key)
        assert ledger.in_doubt() == []
        with c4a.run("late", ledger=ledger), pytest.raises(c4a.EffectInProgress):
            send_email("bob@example.com")
        with pytest.raises(c4a.LedgerError, match="still alive, perhaps stopped"):
            ledger.resolve(key, happened=False, by="ann")
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    [result] = json.loads(out)["results"]
    with c4a.run("late", ledger=ledger):
        assert send_email("bob@example.com") == result
    assert checked == []
    assert [d["pid"] for d in sent(outbox)] == [proc.pid]  # one delivery
    record = ledger.effect(key)
    assert (record.state, record.attempt, record.evidence) == ("succeeded", 1, [])


def test_an_owner_taken_over_reports_the_ledgers_result(target: Target, tmp_path: Path) -> None:
    # On another machine a stopped owner is judged by its lease: check= finds nothing and
    # attempt 2 runs. The owner then acts too (the provider's idempotency key is the fence
    # there); its caller is told the action's recorded result, not its own attempt's.
    outbox = tmp_path / "outbox.jsonl"
    proc, key = start_paused_worker(target, outbox)
    ledger = target.open()

    @c4a.effect(name="send_email", ledger=ledger, check=lambda to: c4a.DidNotHappen())
    def send_email(to: str) -> dict[str, Any]:
        return {"delivered_to": to, "attempt": c4a.current().attempt, "pid": os.getpid()}

    try:
        lapsed(ledger, key)
        with c4a.run("late", ledger=ledger):
            second = send_email("bob@example.com")
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert second["attempt"] == 2
    assert json.loads(out)["results"] == [second]
    record = ledger.effect(key)
    assert (record.state, record.attempt, record.result) == ("succeeded", 2, second)
    [late] = record.evidence  # its own attempt 1, kept and not reported
    assert (late["attempt"], json.loads(late["result"])["pid"]) == (1, proc.pid)


def test_late_result_settles_the_doubt(target: Target, tmp_path: Path) -> None:
    proc, key = start_paused_worker(target, tmp_path / "outbox.jsonl")
    ledger = target.open()
    lapsed(ledger, key)
    assert [r.key for r in ledger.in_doubt()] == [key]
    os.kill(proc.pid, signal.SIGCONT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    record = ledger.effect(key)
    assert record.state == "succeeded"  # what really happened is the truth
    assert record.result == json.loads(out)["results"][0]


def test_late_success_contradicting_a_resolution_is_doubt(target: Target, tmp_path: Path) -> None:
    proc, key = start_paused_worker(target, tmp_path / "outbox.jsonl")
    ledger = target.open()
    lapsed(ledger, key)
    ledger.resolve(key, happened=False, by="ann", note="provider shows nothing yet")
    os.kill(proc.pid, signal.SIGCONT)
    proc.communicate(timeout=60)
    record = ledger.effect(key)
    # Fenced: the late result is not applied, but a blind re-run would now be a likely duplicate.
    assert record.state == "in_doubt"
    assert "late success arrived after it was resolved" in (record.note or "")
    assert record.resolved_by == "ann"
    [late] = record.evidence
    assert late["state"] == "succeeded"
    assert json.loads(late["result"])["delivered_to"] == "bob@example.com"


def test_live_lease_of_a_remote_worker_is_waited_out_then_in_doubt(target: Target) -> None:
    ledger = target.open(lease=0.5, wait=5.0)
    elsewhere = "other-host/abcd1234/4242/777"
    ledger.store.claim(
        key="k" * 64, run_id="r", tool="t", kind="write", args="{}", owner=elsewhere, ttl=0.5
    )
    assert ledger.in_doubt() == []  # a live lease of another machine is not doubted
    time.sleep(0.7)
    [doubt] = ledger.in_doubt()
    assert doubt.note == "its lease expired with no result"


def test_reused_pid_is_not_mistaken_for_the_owner() -> None:
    me = _owner.me()
    # Same machine and boot, a live pid (ours), but another start time: the pid was reused.
    reused = f"{me.host}/{me.boot}/{me.pid}/{int(me.start) - 5 if me.start != '-' else 1}"
    if me.boot == "-":
        pytest.skip("this platform has no boot id, so local deaths are never judged early")
    assert _owner.is_dead_local(reused)
    assert not _owner.is_dead_local(str(me))
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        start = _owner._start_ticks(child.pid)
        alive = f"{me.host}/{me.boot}/{child.pid}/{start}"
        assert not _owner.is_dead_local(alive)
        child.kill()
        child.wait()
        assert _owner.is_dead_local(alive)
    finally:
        child.kill()
    assert not _owner.is_dead_local(f"elsewhere/{me.boot}/{me.pid}/{me.start}")


def test_a_live_owner_in_another_pid_namespace_is_not_judged_dead() -> None:
    # Containers on one machine share its boot id and may share its host name (host network or
    # UTS namespace), but each numbers its own pids: pid 1 in there is not our pid 1.
    unshare = shutil.which("unshare")
    if unshare is None:
        unavailable("needs util-linux unshare to start a process in its own pid namespace")
    script = "from call4agents.engine import _owner; print(_owner.me(), flush=True); input()"
    child = subprocess.Popen(
        [unshare, "--pid", "--fork", "--mount-proc", sys.executable, "-c", script],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        line = child.stdout.readline().strip()
        if not line:
            unavailable(f"cannot make a pid namespace here (needs root): {child.stderr.read()}")
        assert not _owner.is_dead_local(line)  # our pid 1 is another process: no verdict
        owner, me = _owner.Owner.parse(line), _owner.me()
        assert owner is not None
        assert (owner.host, owner.pid) == (me.host, 1)
    finally:
        child.kill()
        child.wait()
