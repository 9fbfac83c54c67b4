"""Behind a transaction pooler: a PgBouncer in ``pool_mode=transaction`` of this module's own, in
front of a throwaway PostgreSQL server of its own (tests/postgres/helpers.py, never the shared
one).

The pool has two server connections, so every worker's transactions run on connections other
workers' transactions used before: a prepared statement, a LISTEN, an advisory lock or a setting
left on one would meet another client there (PgBouncer 1.18 reports such a meeting as
``prepared statement "_pg3_0" does not exist``, or binds the wrong statement).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from sqlalchemy import event

import call4agents as c4a
from call4agents.facade import cli
from call4agents.model.errors import ConfigurationError
from tests import forked
from tests.conftest import TEST_SECRET
from tests.postgres.helpers import (
    WORKER,
    as_owner,
    deliveries,
    free_port,
    give_to_owner,
    plain,
    run,
    throwaway_server,
    unavailable,
)

WORKERS = 4
KEYS = 30


@dataclass
class Bouncer:
    server_url: str  # the PostgreSQL server itself
    url: str  # through PgBouncer, transaction mode, database "postgres"
    statement_url: str  # through PgBouncer, statement mode


def _pgbouncer() -> str:
    found = shutil.which("pgbouncer") or next(
        (p for p in ("/usr/sbin/pgbouncer", "/usr/bin/pgbouncer") if Path(p).exists()), None
    )
    if found is None:
        unavailable("the pooler tests need PgBouncer (Debian: apt-get install pgbouncer)")
    return found


def _bouncer_ini(root: Path, port: int, server_port: int) -> str:
    target = f"host=127.0.0.1 port={server_port} dbname=postgres user=c4a"
    return (
        "[databases]\n"
        f"postgres = {target}\n"
        f"stmt = {target} pool_mode=statement\n"
        "[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir = {root}\n"
        f"auth_type = trust\nauth_file = {root / 'users.txt'}\n"
        f"pidfile = {root / 'pgbouncer.pid'}\nlogfile = {root / 'pgbouncer.log'}\n"
        "pool_mode = transaction\ndefault_pool_size = 2\nmin_pool_size = 0\n"
        "reserve_pool_size = 0\nmax_client_conn = 500\n"
        # So that doctor may read the pool mode from its console.
        "admin_users = c4a\n"
    )


@pytest.fixture(scope="module")
def bouncer() -> Iterator[Bouncer]:
    pgbouncer = _pgbouncer()
    with throwaway_server() as server:
        root, port = server.root, free_port()
        (root / "users.txt").write_text('"c4a" ""\n')
        ini = root / "pgbouncer.ini"
        ini.write_text(_bouncer_ini(root, port, server.port))
        give_to_owner(ini, root / "users.txt")
        run(as_owner(pgbouncer, "-d", "-q", str(ini)), root)
        try:
            base = f"postgresql+psycopg://c4a@127.0.0.1:{port}"
            _until_up(plain(base + "/postgres"))
            yield Bouncer(server.url(), base + "/postgres?c4a_pooler=transaction", base + "/stmt")
        finally:
            pid = root / "pgbouncer.pid"
            if pid.exists():
                os.kill(int(pid.read_text().split()[0]), signal.SIGTERM)


def _until_up(url: str) -> None:
    """PgBouncer answers once its listening socket is open (it forks into the background)."""
    deadline = time.monotonic() + 60
    while True:
        try:
            psycopg.connect(url, autocommit=True).close()
            return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _advisory_locks(bouncer: Bouncer) -> int:
    with psycopg.connect(plain(bouncer.server_url), autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'").fetchone()
    return int(row[0]) if row else -1


@pytest.mark.parametrize("durability", ["power", "process"])
def test_workers_racing_behind_a_transaction_pooler_run_each_key_once(
    bouncer: Bouncer, durability: str, tmp_path: Path
) -> None:
    schema = f"pool_{durability}"
    c4a.Ledger(bouncer.url, schema=schema).close()  # made once, not by the racing workers
    outbox = tmp_path / "outbox.jsonl"
    emails = [f"user{i}@example.com" for i in range(KEYS)]
    env = dict(
        os.environ,
        C4A_TEST_URL=bouncer.url,
        C4A_TEST_SCHEMA=schema,
        DURABILITY=durability,
        CALL4AGENTS_SECRET=TEST_SECRET,
        WAIT="120",
    )
    runs = []
    for i in range(WORKERS):
        order = list(emails)
        random.Random(i).shuffle(order)  # each worker meets the others' keys at other moments
        runs.append((["pooled-run", str(outbox), *order], env))
    workers = forked.run_together(WORKER, runs, timeout=300)
    for worker in workers:
        assert worker.returncode == 0, worker.stdout[-2000:] + worker.stderr[-3000:]
    reports = [json.loads(w.stdout.strip().splitlines()[-1]) for w in workers]
    sent = [d["to"] for d in deliveries(outbox)]
    assert sorted(sent) == sorted(emails)  # every key ran, and once
    for found in reports:
        assert found["errors"] == {}
        assert sorted(found["results"]) == sorted(emails)
        by_key = {to: r["pid"] for to, r in found["results"].items()}
        assert by_key == {to: reports[0]["results"][to]["pid"] for to in emails}
    assert _advisory_locks(bouncer) == 0  # nothing held on a server connection others share


def test_behind_a_pooler_process_durability_is_set_in_each_write_and_no_read(
    bouncer: Bouncer,
) -> None:
    """No startup options behind a pooler: each write transaction turns synchronous commit off
    for itself, and a read, which commits nothing, spends no round trip on it."""
    ledger = c4a.Ledger(bouncer.url, schema="sync_off", durability="process")
    sent: list[str] = []
    # Listened to, the ledger sends every statement through the engine, where it is seen.
    event.listen(ledger.engine, "before_cursor_execute", lambda *a: sent.append(a[2]))
    try:
        send = c4a.effect(name="send", ledger=ledger)(lambda to: f"sent {to}")
        with c4a.run("sync-off"):
            assert send("a") == "sent a"
        assert any("synchronous_commit" in s for s in sent)
        with ledger.store.tx() as conn:
            assert conn.exec_driver_sql("SHOW synchronous_commit").scalar() == "off"
        sent.clear()
        assert [e.args for e in ledger.effects()] == [{"to": "a"}]
        assert sent
        assert not any("synchronous_commit" in s for s in sent)
    finally:
        ledger.close()


def test_a_statement_mode_pooler_is_refused_in_one_line(bouncer: Bouncer) -> None:
    with pytest.raises(ConfigurationError, match="statement mode") as named:
        c4a.Ledger(bouncer.url.replace("transaction", "statement"))
    with pytest.raises(ConfigurationError, match="statement mode") as met:
        c4a.Ledger(bouncer.statement_url)  # not told: PgBouncer's refusal is recognised
    for raised in (named, met):
        assert "\n" not in str(raised.value)
        assert "pool_mode=transaction" in str(raised.value)


def test_prepare_threshold_in_the_url_is_a_number(bouncer: Bouncer) -> None:
    # Straight to the server: psycopg prepares every statement from its first use.
    ledger = c4a.Ledger(bouncer.server_url + "?prepare_threshold=0", schema="prepare_now")
    send = c4a.effect(name="send", ledger=ledger)(lambda to: f"sent {to}")
    with c4a.run("prepared"):
        assert [send("a"), send("a"), send("b")] == ["sent a", "sent a", "sent b"]
    ledger.close()
    with pytest.raises(ConfigurationError, match="not a whole number"):
        c4a.Ledger(bouncer.server_url + "?prepare_threshold=often")


def test_doctor_names_the_pooler_and_its_mode(
    bouncer: Bouncer, capsys: pytest.CaptureFixture[str]
) -> None:
    told, untold = bouncer.url, bouncer.url.replace("?c4a_pooler=transaction", "")
    assert cli.main(["migrate", "--url", told]) == 0
    assert cli.main(["doctor", "--url", told]) == 0
    out = capsys.readouterr().out
    assert "OK    pooler" in out
    assert "pool_mode=transaction; the URL says c4a_pooler=transaction" in out
    assert cli.main(["doctor", "--url", untold]) != 0
    out = capsys.readouterr().out
    assert "FAIL  pooler" in out
    assert "add ?c4a_pooler=transaction to the URL" in out
    assert cli.main(["doctor", "--url", bouncer.server_url]) == 0
    assert "no PgBouncer answers at this address" in capsys.readouterr().out
    assert cli.main(["doctor", "--url", bouncer.statement_url]) != 0
    assert "statement mode cannot carry the ledger" in capsys.readouterr().out
