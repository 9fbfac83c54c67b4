"""Fencing across processes: a worker whose lease lapsed cannot overwrite what was settled since.

Its late result is kept as evidence, and `show` and `doubt` print it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

import call4agents as c4a
from call4agents.facade import cli
from tests.conftest import Target
from tests.postgres.helpers import deliveries, report, spawn, wait_for


@contextmanager
def frozen_mid_call(target: Target, tmp_path: Path, **env: str) -> Iterator[subprocess.Popen[str]]:
    """A worker of another machine stopped (SIGSTOP) inside its tool, its 1 s lease already
    lapsed; resumed after. (A stopped worker of this machine is alive, so it is never doubted.)"""
    started = tmp_path / "started"
    proc = spawn(
        target,
        "fence",
        tmp_path / "outbox.jsonl",
        ["bob@example.com"],
        TOOL_SECONDS="2",
        LEASE="1",
        STARTED=str(started),
        OWNER_HOST="elsewhere",
        **env,
    )
    wait_for(started, proc)
    os.kill(proc.pid, signal.SIGSTOP)
    try:
        ledger = target.open()
        deadline = time.monotonic() + 30
        while not ledger.in_doubt():  # judged by the database clock, once the lease lapses
            assert time.monotonic() < deadline, "the frozen worker's lease never lapsed"
            time.sleep(0.1)
        yield proc
    finally:
        os.kill(proc.pid, signal.SIGCONT)


def cli_out(target: Target, capsys: Any, *argv: str) -> str:
    cli.main([*argv, "--url", target.url, "--schema", str(target.schema)])
    return str(capsys.readouterr().out)


def test_resent_attempt_fences_off_the_late_result(
    pg_target: Target, tmp_path: Path, capsys: Any
) -> None:
    outbox = tmp_path / "outbox.jsonl"
    with frozen_mid_call(pg_target, tmp_path, RETRY_IN_DOUBT="1") as late:
        # retry_in_doubt: re-sent under the same idempotency key as attempt 2, and it lands.
        resend = report(spawn(pg_target, "fence", outbox, ["bob@example.com"], RETRY_IN_DOUBT="1"))
        assert resend["code"] == 0, resend["stderr"]
    first = report(late)
    assert first["code"] == 0, first["stderr"]
    assert first["results"] == resend["results"]  # told the action's result, not its own

    [record] = pg_target.open().effects("fence")
    newer = resend["results"]["bob@example.com"]
    assert (record.state, record.attempt, record.result) == ("succeeded", 2, newer)
    [evidence] = record.evidence  # the late attempt 1, kept and not applied
    assert (evidence["attempt"], evidence["state"]) == (1, "succeeded")
    assert json.loads(evidence["result"])["pid"] == first["pid"]
    assert [d["attempt"] for d in deliveries(outbox)] == [2]  # the provider dropped attempt 1

    shown = cli_out(pg_target, capsys, "show", "fence")
    assert "evidence: attempt 1 ended succeeded late" in shown
    assert "(kept, not applied)" in shown


def test_late_success_after_did_not_happen_is_doubt_with_evidence(
    pg_target: Target, tmp_path: Path, capsys: Any
) -> None:
    with frozen_mid_call(pg_target, tmp_path) as late:
        [doubt] = pg_target.open().in_doubt()
        pg_target.open().resolve(doubt.key, happened=False, by="ann", note="not in the log yet")
    late_report = report(late)
    # Its caller is not told its own result as the action's: the action is in doubt.
    assert late_report["code"] == 1, late_report["stderr"]
    [error] = late_report["errors"].values()
    assert error.startswith("EffectInDoubt:"), error
    assert "kept as evidence" in error, error

    [record] = pg_target.open().in_doubt()  # a late success contradicts the resolution
    assert record.resolved_by == "ann"
    assert "late success arrived after it was resolved" in (record.note or "")
    [evidence] = record.evidence
    assert (evidence["attempt"], evidence["state"]) == (1, "succeeded")

    listed = cli_out(pg_target, capsys, "doubt")
    assert record.key[:12] in listed
    assert "evidence: attempt 1 ended succeeded late" in listed
    shown = cli_out(pg_target, capsys, "show", "fence")
    assert "evidence: attempt 1 ended succeeded late" in shown
    with pytest.raises(c4a.EffectInDoubt):  # and nothing runs it again blindly
        _repeat(pg_target)


def _repeat(target: Target) -> None:
    ledger = target.open()

    @c4a.effect(name="send_email", ledger=ledger)
    def send_email(to: str) -> None:
        raise AssertionError("must not run")

    with c4a.run("fence", ledger=ledger):
        send_email("bob@example.com")
