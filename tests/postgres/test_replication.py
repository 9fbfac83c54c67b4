"""`doctor` reads the primary's replication: a primary and a streaming standby of this module's own
(throwaway servers, tests/postgres/helpers.py: never the shared server). With the standby
replicating asynchronously, doctor warns that a failover can lose acknowledged results; once the
primary waits for it (synchronous_standby_names), doctor says an acknowledged result survives.
And the failover itself, at synchronous replication: the primary killed with `pg_ctl stop -m
immediate` under a load of effects and the standby promoted."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from sqlalchemy.engine import make_url

import call4agents as c4a
from call4agents.facade import cli
from call4agents.model.errors import ConfigurationError, LedgerError
from tests.conftest import TEST_SECRET
from tests.postgres.helpers import WORKER, Server, deliveries, plain, report, throwaway_server


@dataclass
class Pair:
    primary: str
    standby: str

    def __iter__(self) -> Iterator[str]:
        return iter((self.primary, self.standby))


@dataclass
class Cluster:
    """A primary and its standby, with what stops and promotes them."""

    primary: Server
    standby: Server

    def stop_primary(self) -> None:
        """The primary's crash: no checkpoint, no goodbye to the standby."""
        self.primary.stop()

    def promote(self) -> None:
        self.standby.promote()


@contextlib.contextmanager
def _cluster(synchronous: bool) -> Iterator[tuple[Pair, Cluster]]:
    sync = {"synchronous_standby_names": "*"} if synchronous else {}
    with (
        throwaway_server(settings=sync) as primary,
        throwaway_server(standby_of=primary) as standby,
    ):
        found = Pair(primary.url(), standby.url())
        _until(found.primary, "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'")
        yield found, Cluster(primary, standby)


@pytest.fixture(scope="module")
def pair() -> Iterator[Pair]:
    with _cluster(synchronous=False) as (found, _):
        yield found


def _until(url: str, query: str, want: object = 1) -> None:
    """Until ``query`` answers ``want`` (a standby connecting, a setting taking effect)."""
    deadline = time.monotonic() + 120
    while True:
        with psycopg.connect(plain(url), autocommit=True) as conn:
            row = conn.execute(query).fetchone()
        if row is not None and row[0] == want:
            return
        assert time.monotonic() < deadline, f"{query} never answered {want!r}"
        time.sleep(0.1)


def _doctor(url: str, capsys: pytest.CaptureFixture[str]) -> str:
    cli.main(["doctor", "--url", url])
    return next(line for line in capsys.readouterr().out.splitlines() if "replication" in line)


def test_doctor_warns_of_asynchronous_replication_then_approves_synchronous(
    pair: Pair, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["migrate", "--url", pair.primary]) == 0
    line = _doctor(pair.primary, capsys)
    assert line.startswith("WARN")
    assert "sync_state async" in line
    assert "a failover can lose results the primary acknowledged" in line
    assert "synchronous_standby_names" in line
    with pytest.raises(LedgerError, match=r"no standby of .* confirms its commits"):
        c4a.Ledger(pair.primary, require_sync_standby=True, open_retry=0)
    with psycopg.connect(plain(pair.primary), autocommit=True) as conn:
        conn.execute("ALTER SYSTEM SET synchronous_standby_names = 'ANY 1 (*)'")
        conn.execute("SELECT pg_reload_conf()")
    try:
        _until(pair.primary, "SELECT sync_state FROM pg_stat_replication", "quorum")
        line = _doctor(pair.primary, capsys)
        assert line.startswith("OK")
        assert "an acknowledged result survives a failover" in line
        c4a.Ledger(pair.primary, require_sync_standby=True).close()
        with pytest.raises(ConfigurationError, match="durability='power'"):
            c4a.Ledger(pair.primary, require_sync_standby=True, durability="process")
    finally:
        with psycopg.connect(plain(pair.primary), autocommit=True) as conn:
            conn.execute("ALTER SYSTEM RESET synchronous_standby_names")
            conn.execute("SELECT pg_reload_conf()")


def test_a_standby_as_the_only_host_is_named_read_only(
    pair: Pair, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["migrate", "--url", pair.primary]) == 0
    _until(pair.standby, "SELECT count(*) FROM pg_tables WHERE tablename = 'c4a_effects'")
    assert _doctor(pair.standby, capsys).startswith("FAIL")
    with pytest.raises(LedgerError) as raised:
        c4a.Ledger(pair.standby, open_retry=0)
    assert "is read-only" in str(raised.value)
    assert "target_session_attrs=read-write" in str(raised.value)


def test_a_failover_with_synchronous_replication_loses_nothing_and_runs_nothing_twice(
    tmp_path: Path,
) -> None:
    """Workers on both hosts' URL (``target_session_attrs=read-write``) run effects; the primary
    is killed mid-load and the standby promoted. The workers carry on against the new primary
    without a restart, and then a fresh process repeats every call: no email went twice, and
    every result a worker returned is the one the new primary holds."""
    with _cluster(synchronous=True) as (pair, cluster):
        assert cli.main(["migrate", "--url", pair.primary]) == 0
        hosts = ",".join(
            make_url(u).host + f":{make_url(u).port}" for u in (pair.primary, pair.standby)
        )
        url = f"postgresql+psycopg://c4a@{hosts}/postgres?target_session_attrs=read-write"
        outbox = tmp_path / "outbox.jsonl"
        emails = [f"user{i}@example.com" for i in range(60)]
        env = dict(os.environ, C4A_TEST_URL=url, C4A_TEST_SCHEMA="", TOOL_SECONDS="0.05",
                   CALL4AGENTS_SECRET=TEST_SECRET, WAIT="120", LEASE="60")  # fmt: skip
        workers = [
            subprocess.Popen(
                [sys.executable, str(WORKER), "failover", str(outbox), *emails[i::3]],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for i in range(3)
        ]
        deadline = time.monotonic() + 120
        while len(deliveries(outbox)) < 12:
            assert time.monotonic() < deadline, "the workers never got going"
            time.sleep(0.01)
        cluster.stop_primary()
        cluster.promote()
        reports = [report(w, timeout=300) for w in workers]
        again = subprocess.run(
            [sys.executable, str(WORKER), "failover", str(outbox), *emails],
            env=env, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
    returned = {to: r for found in reports for to, r in found.get("results", {}).items()}
    failed = {to: e for found in reports for to, e in found.get("errors", {}).items()}
    for found in reports:  # each worker went on through the failover, to its last key
        assert found["code"] in (0, 1), found["stderr"]
    # A call made while no read-write server answers fails before its claim (nothing ran; how
    # many depends on how long the promotion takes on a busy machine), and only the call each
    # worker had under way when the primary died may be in doubt. Nothing else may fail.
    assert all(e.startswith(("LedgerError", "EffectInDoubt")) for e in failed.values()), failed
    in_doubt = [to for to, e in failed.items() if e.startswith("EffectInDoubt")]
    assert len(in_doubt) <= 3, failed  # at most the call each worker had under way
    final = json.loads(again.stdout.strip().splitlines()[-1])
    sent = [d["to"] for d in deliveries(outbox)]
    assert len(sent) == len(set(sent)), "an email went twice"
    for to, result in returned.items():
        assert final["results"].get(to) == result, f"{to}: its returned result was lost"
    assert len(returned) + len(failed) == len(emails)
