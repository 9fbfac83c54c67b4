"""Races between real processes: one execution per action, and waiting instead of doubting."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from tests.conftest import Target

CHILD = Path(__file__).with_name("agent_child.py")


def spawn(target: Target, outbox: Path, *keys: str, **env: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(CHILD), "none", "race", str(outbox), *keys],
        env=dict(target.env(), **env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_eight_processes_hundred_keys_one_execution_each(target: Target, tmp_path: Path) -> None:
    target.open().close()  # create the schema once, as a deployment's migrate step would
    outbox = tmp_path / "outbox.jsonl"
    keys = [f"user{i}@example.com" for i in range(100)]
    procs = [spawn(target, outbox, *random.sample(keys, len(keys))) for _ in range(8)]
    outputs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0] * 8, [err[-2000:] for _, err in outputs]
    executed = Counter(json.loads(line)["to"] for line in outbox.read_text().splitlines())
    assert executed == Counter(keys)  # every key exactly once
    # Every process got the same recorded result for every key, whoever ran it.
    results = [json.loads(out)["results"] for out, _ in outputs]
    by_key = [{r["delivered_to"]: r["pid"] for r in rs} for rs in results]
    assert all(m == by_key[0] for m in by_key)


def test_second_caller_mid_call_gets_the_result(target: Target, tmp_path: Path) -> None:
    outbox = tmp_path / "outbox.jsonl"
    target.open().close()
    first = spawn(target, outbox, TOOL_SECONDS="3", LEASE="1")  # renewed by the heartbeat
    deadline = time.monotonic() + 30
    while not first.poll() and time.monotonic() < deadline:
        started = [r for r in target.open().effects("race") if r.state == "started"]
        if started:
            break
        time.sleep(0.05)
    second = spawn(target, outbox, TOOL_SECONDS="3", LEASE="1")
    out1, err1 = first.communicate(timeout=60)
    out2, err2 = second.communicate(timeout=60)
    assert (first.returncode, second.returncode) == (0, 0), err1 + err2
    assert json.loads(out1) == json.loads(out2)
    assert len(outbox.read_text().splitlines()) == 1


def test_impatient_second_caller_gets_in_progress_not_doubt(target: Target, tmp_path: Path) -> None:
    outbox = tmp_path / "outbox.jsonl"
    target.open().close()
    # The first call holds inside its tool until released, however slowly either child starts.
    first = spawn(target, outbox, HOLD=str(tmp_path), LEASE="1")  # renewed by the heartbeat
    _wait_for(tmp_path / "running", first)
    second = spawn(target, outbox, LEASE="1", WAIT="0.5")
    out2, _ = second.communicate(timeout=60)
    (tmp_path / "release").touch()
    assert second.returncode == 4, out2
    assert "being run by another worker" in json.loads(out2)["in_progress"]
    assert first.wait(timeout=60) == 0
    assert len(outbox.read_text().splitlines()) == 1


def _wait_for(signal_file: Path, child: subprocess.Popen[str]) -> None:
    """Until the child's tool says it is running (its intent is then durable)."""
    deadline = time.monotonic() + 120
    while not signal_file.exists():
        assert child.poll() is None, child.communicate()
        assert time.monotonic() < deadline, "the tool never started"
        time.sleep(0.01)
