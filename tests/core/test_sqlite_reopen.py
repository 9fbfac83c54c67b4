"""Opening an SQLite ledger again in one process must never drop the locks its open one holds.

POSIX drops every advisory lock a process holds on a file when *any* of its descriptors of that
file is closed (sqlite.org, "How To Corrupt An SQLite Database File", 2.2). A library that opened
and closed the database file itself, beside SQLite's own connections, would let another process
take the exclusive lock, checkpoint and delete the WAL under live connections: "disk I/O error",
then a corrupt file. These tests run the real thing: processes that re-open, read and write one
ledger at once.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

import call4agents as c4a

CHILD = Path(__file__).with_name("reopen_child.py")


@pytest.mark.slow
@pytest.mark.parametrize(
    "roles",
    [
        # A lone worker and an operator's reads: nobody else's lock hides a dropped one.
        ("worker", "reader"),
        ("worker", "worker", "writer", "reader"),
    ],
    ids=["worker-and-operator", "crowd"],
)
def test_reopening_while_others_read_and_write_keeps_the_file_whole(
    tmp_path: Path, roles: tuple[str, ...]
) -> None:
    db = tmp_path / "ledger.db"
    url = f"sqlite:///{db}"
    ran = tmp_path / "ran.txt"
    c4a.Ledger(url).close()  # the schema exists before the crowd arrives
    children = [
        subprocess.Popen(
            [sys.executable, str(CHILD), role, url, "8", str(ran)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for role in roles
    ]
    outcomes = [
        (role, *child.communicate(timeout=240), child.returncode)
        for role, child in zip(roles, children, strict=True)
    ]
    for role, out, err, code in outcomes:
        assert code == 0, f"{role} failed ({code}):\n{err[-3000:]}"
        assert out.strip() == "ok", role

    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    executions = Counter(ran.read_text(encoding="utf-8").split())
    assert executions, "no tool ran"
    assert [label for label, n in executions.items() if n > 1] == []
    with c4a.Ledger(url) as ledger:
        records = ledger.effects()
    assert Counter(r.run_id for r in records if r.state == "succeeded") == executions


@pytest.mark.parametrize("case", ["other", "own"])
def test_a_fork_waits_for_another_threads_write_to_end(tmp_path: Path, case: str) -> None:
    """SQLite's lock table is copied by fork: a child forked while another thread held the
    write lock could never take it (fails after its busy timeout). The fork waits for the
    write to end instead; a fork from inside a write does not wait for itself."""
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    c4a.Ledger(url).close()
    done = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("fork_gate_child.py")), url, case],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (done.returncode, done.stdout.strip()) == (0, "ok"), done.stderr
