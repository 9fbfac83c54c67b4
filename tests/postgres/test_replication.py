"""`doctor` reads the primary's replication: a primary and a streaming standby of this module's own
(initdb, pg_basebackup and pg_ctl on free ports, never the shared server). With the standby
replicating asynchronously, doctor warns that a failover can lose acknowledged results; once the
primary waits for it (synchronous_standby_names), doctor says an acknowledged result survives."""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

import call4agents as c4a
from call4agents.facade import cli
from call4agents.model.errors import LedgerError
from tests.postgres.helpers import plain
from tests.postgres.test_tls import _as_owner, _bin, _free_port, _run


@dataclass
class Pair:
    primary: str
    standby: str


@pytest.fixture(scope="module")
def pair() -> Iterator[Pair]:
    initdb, pg_ctl, basebackup = _bin("initdb"), _bin("pg_ctl"), _bin("pg_basebackup")
    root = Path(tempfile.mkdtemp(prefix="c4a-replica-"))
    primary, standby = root / "primary", root / "standby"
    started: list[Path] = []
    try:
        if _as_owner("x")[0] != "x":
            shutil.chown(root, "postgres")
        _run(_as_owner(initdb, "-D", str(primary), "-U", "c4a", "--auth=trust", "--no-sync"), root)
        ports = {primary: _free_port(), standby: _free_port()}

        def start(data: Path) -> None:
            options = f"-p {ports[data]} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off"
            log = str(root / f"{data.name}.log")
            _run(_as_owner(pg_ctl, "-D", str(data), "-o", options, "-w", "-l", log, "start"), root)
            started.append(data)

        start(primary)
        host = ["-h", "127.0.0.1", "-p", str(ports[primary]), "-U", "c4a"]
        _run(_as_owner(basebackup, *host, "-D", str(standby), "-R", "-X", "stream"), root)
        start(standby)
        url = "postgresql+psycopg://c4a@127.0.0.1:{}/postgres"
        found = Pair(url.format(ports[primary]), url.format(ports[standby]))
        _until(found.primary, "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'")
        yield found
    finally:
        for data in reversed(started):
            _run(_as_owner(pg_ctl, "-D", str(data), "-m", "immediate", "stop"), root)
        shutil.rmtree(root, ignore_errors=True)


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
    with psycopg.connect(plain(pair.primary), autocommit=True) as conn:
        conn.execute("ALTER SYSTEM SET synchronous_standby_names = 'ANY 1 (*)'")
        conn.execute("SELECT pg_reload_conf()")
    try:
        _until(pair.primary, "SELECT sync_state FROM pg_stat_replication", "quorum")
        line = _doctor(pair.primary, capsys)
        assert line.startswith("OK")
        assert "an acknowledged result survives a failover" in line
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
