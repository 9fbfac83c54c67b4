"""The ledger's storage: opening, migrating, refusing what is unsafe."""

from __future__ import annotations

import re
import stat
import subprocess
import sys
import textwrap
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select, text

import call4agents as c4a
from call4agents.facade import _children
from call4agents.storage import _db
from call4agents.storage.migrations import CURRENT
from call4agents.storage.tables import effects, schema_version
from tests.conftest import Target


def test_newer_schema_is_refused_and_left_alone(target: Any) -> None:
    ledger = target.open()
    with ledger.engine.begin() as conn:
        conn.execute(schema_version.update().values(version=999))
    ledger.close()
    with pytest.raises(c4a.LedgerError, match=r"newer Call4Agents \(schema version 999"):
        target.open()
    with pytest.raises(c4a.LedgerError, match="newer"):
        target.open(auto_migrate=False)


def test_migrate_is_safe_to_repeat(target: Any) -> None:
    from call4agents.storage.migrations import migrate

    ledger = target.open()
    assert migrate(ledger.engine, schema=target.schema) == (CURRENT, CURRENT)
    assert migrate(ledger.engine, schema=target.schema) == (CURRENT, CURRENT)


def test_a_ledger_of_a_development_build_is_refused_and_left_alone(target: Any) -> None:
    # Versions before the baseline were never released: no upgrade reads them, and nothing
    # touches them, neither an open nor `migrate`.
    from call4agents.storage import migrations

    ledger = target.open()
    with c4a.run("old"):
        c4a.effect(name="mail.send", ledger=ledger)(lambda to: to)("a@x")
    with ledger.engine.begin() as conn:
        conn.execute(schema_version.update().values(version=12))
    engine = ledger.engine
    refused = r"schema version 12, written by a development build .* The ledger was not changed"
    with pytest.raises(c4a.LedgerError, match=refused):
        target.open()
    with pytest.raises(c4a.LedgerError, match=refused):
        target.open(auto_migrate=False)
    with pytest.raises(c4a.LedgerError, match=refused):
        migrations.migrate(engine, schema=target.schema)
    with engine.connect() as conn:
        assert conn.execute(select(schema_version.c.version)).scalar() == 12
        assert conn.execute(select(effects.c.run_id)).scalars().all() == ["old"]


def test_a_migration_appended_after_the_baseline_brings_a_ledger_up_once(target: Any) -> None:
    # The next change to the schema is an entry in MIGRATIONS: the first open after it runs the
    # entry and records its version in one transaction; the ledger's rows stay.
    from call4agents.storage import migrations
    from call4agents.storage.dialects import qualified

    ledger = target.open()
    with c4a.run("before"):
        c4a.effect(name="mail.send", ledger=ledger)(lambda to: to)("a@x")
    ledger.close()
    ran: list[int] = []

    def add_notes(conn: Any) -> None:
        ran.append(1)
        conn.execute(text(f"CREATE TABLE {qualified(conn, 'c4a_test_notes')} (note TEXT)"))

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(migrations, "MIGRATIONS", [add_notes])
        patch.setattr(migrations, "CURRENT", migrations.BASELINE + 1)
        with target.open() as upgraded:
            assert [r.run_id for r in upgraded.effects()] == ["before"]
            after = (migrations.BASELINE + 1,) * 2
            assert migrations.migrate(upgraded.engine, schema=target.schema) == after
            with upgraded.engine.connect() as conn:
                assert conn.execute(select(schema_version.c.version)).scalar() == after[0]
                notes = qualified(conn, "c4a_test_notes")
                assert conn.execute(text(f"SELECT count(*) FROM {notes}")).scalar() == 0
    assert ran == [1]


def test_threads_making_the_secret_at_once_all_get_the_same_one(tmp_path: Path) -> None:
    from call4agents.engine.ledger_core import _read_or_create_secret

    path = tmp_path / "ledger" / "secret"
    start = threading.Barrier(8)

    def make() -> bytes:
        start.wait()
        return _read_or_create_secret(path)

    with ThreadPoolExecutor(8) as pool:
        found = list(pool.map(lambda _: make(), range(8)))
    assert len(set(found)) == 1
    assert [p.name for p in path.parent.iterdir()] == ["secret"]  # no temporary file left


def test_sqlite_files_are_owner_only(tmp_path: Path) -> None:
    ledger = c4a.Ledger(f"sqlite:///{tmp_path / 'sub' / 'ledger.db'}", secret=None)

    @c4a.effect(ledger=ledger, redact=("token",))
    def step(token: str) -> int:
        return 1

    with c4a.run("r"):
        step("abcdefgh")  # touches the secret file
    ledger.close()
    for path in (tmp_path / "sub").iterdir():
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode & 0o077 == 0, f"{path.name} is {oct(mode)}"
    assert stat.S_IMODE((tmp_path / "sub").stat().st_mode) & 0o077 == 0


def test_network_file_systems_are_refused() -> None:
    mounts = textwrap.dedent(
        """\
        /dev/vda1 / ext4 rw 0 0
        server:/export /mnt/shared nfs4 rw 0 0
        //nas/share /mnt/smb cifs rw 0 0
        """
    )
    assert _db.mount_fs_type(Path("/mnt/shared/agents"), mounts) == "nfs4"
    assert _db.mount_fs_type(Path("/mnt/smb"), mounts) == "cifs"
    assert _db.mount_fs_type(Path("/mnt/sharedother"), mounts) == "ext4"
    assert _db.mount_fs_type(Path("/home/x"), mounts) == "ext4"


def test_network_fs_check_names_the_fix(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(_db, "mount_fs_type", lambda path, mounts_text=None: "nfs4")
    with pytest.raises(c4a.LedgerError, match=r"network file system \(nfs4\).*allow_network_fs"):
        c4a.Ledger(f"sqlite:///{tmp_path / 'l.db'}")
    c4a.Ledger(f"sqlite:///{tmp_path / 'l.db'}", allow_network_fs=True).close()


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("mysql://root@localhost/x", "unsupported ledger URL scheme 'mysql'"),
        ("sqlite:///:memory:", "in-memory SQLite ledger forgets everything"),
        ("sqlite://", "in-memory SQLite ledger"),
    ],
)
def test_bad_urls_say_what_to_use(url: str, message: str) -> None:
    with pytest.raises(c4a.ConfigurationError, match=message):
        c4a.Ledger(url)


def test_unreachable_postgres_hides_the_password() -> None:
    pytest.importorskip("psycopg")
    url = "postgresql+psycopg://app:s3cr%21t@127.0.0.1:1/nowhere?connect_timeout=2"
    with pytest.raises(c4a.LedgerError) as info:
        c4a.Ledger(url, open_retry=0.5)  # tried again for half a second, then one error
    assert "no PostgreSQL server answered" in str(info.value)
    assert "s3cr" not in str(info.value)
    assert "***" in str(info.value)


def test_eight_processes_open_a_brand_new_ledger_at_once(tmp_path: Path) -> None:
    db = tmp_path / "new" / "ledger.db"
    gate = tmp_path / "gate"
    gate.mkdir()
    # Each child says it is ready once imported, then waits for the go: however slowly a busy
    # machine imports, all eight open the ledger together.
    code = textwrap.dedent(
        f"""
        import pathlib, sys, time
        import call4agents as c4a
        gate = pathlib.Path({str(gate)!r})
        (gate / ("ready-" + sys.argv[1])).touch()
        while not (gate / "go").exists():
            time.sleep(0.001)
        ledger = c4a.Ledger({f"sqlite:///{db}"!r})
        @c4a.effect(ledger=ledger, name="hello")
        def hello(n):
            return n
        with c4a.run("r" + sys.argv[1]):
            assert hello(1) == 1
        print("ok")
        """
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, str(i)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(8)
    ]
    while len(list(gate.glob("ready-*"))) < 8:
        assert all(p.poll() is None for p in procs), [p.communicate() for p in procs]
        time.sleep(0.01)
    (gate / "go").touch()
    # A limit that grows with the machine's load (or $CALL4AGENTS_CHILD_TIMEOUT), not a fixed one.
    outputs = [p.communicate(timeout=_children.time_limit(60)) for p in procs]
    assert [p.returncode for p in procs] == [0] * 8, outputs
    ledger = c4a.Ledger(f"sqlite:///{db}")
    assert len(ledger.runs()) == 8
    ledger.close()


def test_tool_name_is_the_same_as_script_and_as_module(tmp_path: Path) -> None:
    # `python mailer.py` runs it as __main__; another program imports it as `mailer`.
    (tmp_path / "mailer.py").write_text(
        textwrap.dedent(
            f"""
            import call4agents as c4a
            c4a.init({f"sqlite:///{tmp_path / 'l.db'}"!r})

            @c4a.effect
            def send(to):
                with open({str(tmp_path / "outbox")!r}, "a") as f:
                    f.write(to + "\\n")
                return to

            if __name__ == "__main__":
                with c4a.run("r"):
                    print(send.tool, send("bob"))
            """
        )
    )
    (tmp_path / "other.py").write_text(
        "import call4agents as c4a, mailer\nwith c4a.run('r'):\n    print(mailer.send.tool, "
        "mailer.send('bob'))\n"
    )
    for script in ("mailer.py", "other.py"):
        done = subprocess.run(
            [sys.executable, script], cwd=tmp_path, capture_output=True, text=True, check=False
        )
        assert done.stdout.strip() == "mailer.send bob", done.stderr
    assert (tmp_path / "outbox").read_text() == "bob\n"


def test_reads_run_beside_a_writer(tmp_path: Path) -> None:
    import sqlite3

    db = tmp_path / "ledger.db"
    ledger = c4a.Ledger(f"sqlite:///{db}", busy_timeout=0.5)
    writer = sqlite3.connect(db, isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")  # another process in the middle of a write
    try:
        assert ledger.effects() == []  # WAL readers do not wait for the write lock
        assert ledger.runs() == []
    finally:
        writer.execute("ROLLBACK")
        writer.close()
        ledger.close()


def test_every_statement_of_an_action_goes_through_the_engine(target: Target) -> None:
    """A listener on the engine (OpenTelemetry's SQLAlchemy instrumentation, a test's fault
    injection) sees every statement a fresh action and a repeat send, with nobody choosing a
    faster way around it. On SQLite, the driver's own trace of what each connection ran is
    held against what the listener saw: nothing reaches the database another way."""
    from sqlalchemy import event

    ledger = target.open()
    ran: list[str] = []  # what SQLite ran, as its trace reports it
    if target.backend == "sqlite":
        event.listen(ledger.engine, "connect", lambda conn, _: conn.set_trace_callback(ran.append))
        ledger.engine.dispose()  # every connection from here on is traced

    @c4a.effect(name="seen", ledger=ledger)
    def tool(n: int) -> int:
        return n

    with c4a.run("seen-run", ledger=ledger):
        assert tool(0) == 0  # the connections an action keeps are open before anyone listens
        seen: list[str] = []
        event.listen(ledger.engine, "before_cursor_execute", lambda *a: seen.append(a[2]))
        ran.clear()
        assert tool(1) == 1
        ledger.recent.clear()
        assert tool(1) == 1  # a repeat: the claim's insert meets the row, then reads it
        ledger.recent.forget()  # as in a resumed run: the recorded result is read first
        assert tool(1) == 1
    assert any("INSERT INTO" in sql and "c4a_effects" in sql for sql in seen)  # the intent
    assert any(sql.startswith("UPDATE") and "c4a_effects" in sql for sql in seen)  # the outcome
    assert any(sql.startswith("SELECT") and ".owner" in sql for sql in seen)  # the row met
    assert any("c4a_effects" in sql and "'succeeded'" in sql for sql in seen)  # the result
    if target.backend == "sqlite":
        # The transaction and the connection's upkeep; "--" marks what SQLite ran inside a
        # statement (a trigger's, PRAGMA optimize's).
        control = ("BEGIN", "COMMIT", "ROLLBACK", "PRAGMA", "--")
        statements = [s for s in ran if not s.lstrip().upper().startswith(control)]
        assert statements
        # SQLite's trace shows each statement with its parameters written in: compare the text
        # up to the first one.
        sent = [re.split("[:?]", sql)[0] for sql in seen]
        assert all(any(s.startswith(head) for head in sent) for s in statements), statements


def test_more_threads_than_kept_connections(ledger: c4a.Ledger) -> None:
    """Connections are kept checked out between actions, at most ``SIZE`` of each kind; more
    threads at once check out more and give them back, and none is ever lost to the pool."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    store = ledger.store
    kept = {id(k): k for k in (store._writes, store._reads)}.values()
    for k in kept:
        k.SIZE = 2  # type: ignore[misc]
    inside = threading.Barrier(8)
    ran: list[int] = []

    @c4a.effect(name="busy", ledger=ledger)
    def busy(n: int) -> int:
        inside.wait(timeout=10)  # eight calls in flight at once
        ran.append(n)
        return n * 10

    def both(n: int) -> tuple[int, int]:
        return busy(n), busy(n)  # the repeat comes from the ledger

    with c4a.run("crowd", ledger=ledger), ThreadPoolExecutor(8) as pool:
        results = list(pool.map(c4a.bind(both), range(8)))
    assert results == [(n * 10, n * 10) for n in range(8)]
    assert sorted(ran) == list(range(8))  # each once
    idle = sum(len(k._idle) for k in kept)
    assert 0 < idle <= 2 * len(kept)  # never more kept than allowed
    pool_of = ledger.engine.pool
    assert pool_of.checkedout() == idle  # type: ignore[attr-defined]  # the rest went back
    # With none kept, every transaction checks its connection out of the pool and back in.
    for k in kept:
        k.close()
        k.SIZE = 0  # type: ignore[misc]
    ledger.recent.clear()
    with c4a.run("crowd", ledger=ledger):
        assert busy(0) == 0  # a repeat, read from the database
        inside = threading.Barrier(1)
        assert busy(99) == 990  # a fresh action, claimed and finished
    assert ledger.store.get(ledger.effects("crowd")[-1].key) is not None
    assert pool_of.checkedout() == 0  # type: ignore[attr-defined]
    assert sorted(ran) == [*range(8), 99]


def _wire(ledger: c4a.Ledger, **options: Any) -> Any:
    @c4a.effect(name="wire", kind="irreversible", ledger=ledger, **options)
    def wire(amount: int) -> str:
        return f"sent {amount}"

    return wire


def _ask(wire: Any, run_id: str, amount: int) -> c4a.ApprovalRequest:
    with c4a.run(run_id), pytest.raises(c4a.ApprovalRequired) as info:
        wire(amount)
    request = info.value.request
    assert isinstance(request, c4a.ApprovalRequest)
    return request


def test_who_asked_names_the_ledgers_policy_or_the_tools_own_yes(target: Any) -> None:
    ledger = target.open(approval_for=("irreversible",))
    by_policy = _ask(_wire(ledger), "p", 1)
    assert by_policy.asked_by is not None
    assert "policy: irreversible tools" in by_policy.asked_by
    by_tool = _ask(_wire(ledger, approval=True), "t", 1)
    assert by_tool.asked_by is not None
    assert "approval=True" in by_tool.asked_by
    # What the inbox shows of who asked is signed: edited, the ticket verifies as nothing.
    with ledger.engine.begin() as conn:
        from call4agents.storage.tables import approvals as table

        conn.execute(
            table.update().where(table.c.ticket == by_tool.ticket).values(asked_by="nobody")
        )
    with pytest.raises(c4a.LedgerError, match="signature check"):
        ledger.approve(by_tool.ticket, by="ann")
