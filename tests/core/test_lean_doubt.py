"""`call4agents doubt` on SQLite takes the lean route (``storage/_lean.py``, ``sqlite3`` alone).

The lean route must be the full route, only faster: the same table, JSON, evidence lines, exit
codes and errors, the same sweep (the same actions moved, with the same notes, under the same
conditions), on connections set up the same way. Twin ledgers, filled alike, are read one by
each route and must answer alike, byte for byte, and be left alike; the lean statements are held
to their SQLAlchemy twins one by one. Anything the lean route does not serve (another URL form,
no ledger, another schema version) goes to the full route, whose error it then is.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import call4agents as c4a
from call4agents.engine import _owner
from call4agents.facade.cli import _commands, main
from call4agents.storage import _db, _lean, _sqlite, reads
from call4agents.storage.migrations import CURRENT

Outcome = tuple[int, str, str]
CLOCK_SLACK = 5.0  # seconds between two routes' sweeps of twin ledgers, on a loaded machine


def _full_route_closed(args: Any) -> Any:
    raise AssertionError("the full route was taken where the lean one should serve")


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Any:
    """``run(route, *argv)``: the command by one route ("lean": the full route is closed, so the
    lean one must serve; "full": the lean route is closed; "user": as a user runs it)."""

    def call(route: str, *argv: str) -> Outcome:
        with monkeypatch.context() as m:
            if route == "lean":
                m.setattr(_commands, "_open", _full_route_closed)
            elif route == "full":
                m.setattr(_commands, "_in_doubt_lean", lambda args: None)
            code = main(list(argv))
        out, err = capsys.readouterr()
        return code, out, err

    return call


def new_ledger(path: Path) -> str:
    url = f"sqlite:///{path}"
    c4a.Ledger(url).close()
    return url


def put(url: str, *rows: dict[str, Any]) -> None:
    """Write actions as they stand, without running anything."""
    with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
        for row in rows:
            names = ", ".join(row)
            marks = ", ".join("?" for _ in row)
            conn.execute(f"INSERT INTO c4a_effects ({names}) VALUES ({marks})", tuple(row.values()))
    conn.close()


def action(key: str, now: float, **fields: Any) -> dict[str, Any]:
    """An action last changed 90 minutes ago ("1h ago" in the table, whenever it is printed)."""
    return {
        "key": key * 64,
        "run_id": "ticket-1",
        "tool": "charge",
        "kind": "write",
        "state": "in_doubt",
        "attempt": 1,
        "args": '{"amount": 1200, "to": "zoë"}',
        "created_at": now - 7200.25,
        "updated_at": now - 5400.5,
        **fields,
    }


def rows_of(url: str) -> list[dict[str, Any]]:
    with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
        found = conn.execute(f"SELECT {', '.join(_lean.COLUMNS)} FROM c4a_effects ORDER BY seq")
        rows = [dict(zip(_lean.COLUMNS, r, strict=True)) for r in found]
    conn.close()
    return rows


# -- what is in doubt already ---------------------------------------------------------------------


def settled_doubts(now: float) -> list[dict[str, Any]]:
    """In doubt for every reason the table shows: a tool's error (long, on several lines), a note
    alone, late evidence (a result and an error), a recorded result; and one action done."""
    evidence = [
        {"attempt": 1, "state": "succeeded", "result": '{"id": "ch-1"}', "error": None},
        {"attempt": 2, "state": "failed", "result": None, "error": "TimeoutError: " + "x" * 80},
    ]
    return [
        action("a", now, error="TimeoutError: payment gateway timed out\n  after 30 s " + "y" * 70),
        action("b", now, tool="send_email", note="its lease expired with no result", attempt=3),
        action(
            "c",
            now,
            run_id="ticket-2",
            note="a late success arrived after it was resolved as not happened",
            resolved_by="ann",
            evidence=json.dumps(evidence),
            attempt=2,
        ),
        action("d", now, state="succeeded", result='{"id": "msg-1"}'),
        action("e", now, tool="refund", result='{"partial": true}', error="ValueError: half"),
    ]


def test_nothing_in_doubt_reads_alike(tmp_path: Path, run: Any) -> None:
    url = new_ledger(tmp_path / "ledger.db")
    for argv in (["doubt"], ["doubt", "--json"], ["doubt", "--fail-if-any"]):
        lean = run("lean", *argv, "--url", url)
        assert lean == run("full", *argv, "--url", url)
        assert lean[0] == 0
    assert run("lean", "doubt", "--url", url)[1] == "No actions in doubt.\n"
    assert run("lean", "doubt", "--json", "--url", url)[1] == "[]\n"


def test_actions_in_doubt_read_alike_byte_for_byte(tmp_path: Path, run: Any) -> None:
    url = new_ledger(tmp_path / "ledger.db")
    put(url, *settled_doubts(time.time()))
    for argv in (
        ["doubt"],
        ["doubt", "--json"],
        ["doubt", "--fail-if-any"],
        ["--json", "doubt", "--fail-if-any"],
    ):
        lean = run("lean", *argv, "--url", url)
        assert lean == run("full", *argv, "--url", url), argv
        assert lean[0] == (3 if "--fail-if-any" in argv else 0)
        assert lean[2] == ""
    out = run("lean", "doubt", "--url", url)[1]
    assert "evidence: attempt 1 ended succeeded late" in out
    assert "evidence: attempt 2 ended failed late: TimeoutError: xxx" in out
    assert out.count("1h ago") == 4
    assert out.rstrip().endswith("--did-not-happen")
    found = json.loads(run("lean", "doubt", "--json", "--url", url)[1])
    assert [item["key"][0] for item in found] == ["a", "b", "c", "e"]
    assert found[2]["evidence"][0]["result"] == '{"id": "ch-1"}'
    assert found[3]["result"] == {"partial": True}


# -- what the sweep moves -------------------------------------------------------------------------


@pytest.fixture
def owners() -> Iterator[dict[str, str]]:
    """Owner texts: a process of this machine that is gone, one that runs, and claims of this
    process (one whose tool no thread of ours runs; one that runs)."""
    me = _owner.me()
    if me.boot == "-":
        pytest.skip("this platform has no boot id, so local deaths are never judged")
    gone = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    gone_start = _owner._start_ticks(gone.pid)
    gone.kill()
    gone.wait()
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    running = _owner.claim_owner()
    try:
        yield {
            "gone": f"{me.host}/{me.boot}/{gone.pid}/{gone_start}/4",
            "alive": f"{me.host}/{me.boot}/{alive.pid}/{_owner._start_ticks(alive.pid)}/1",
            "ours_gone": f"{_owner.me_text()}/987654321",
            "ours_running": running,
        }
    finally:
        _owner.finished(running)
        alive.kill()
        alive.wait()


def started_actions(now: float, owners: dict[str, str]) -> list[dict[str, Any]]:
    lapsed, live = now - 60.0, now + 3600.0

    def started(key: str, owner: str | None, lease: float, **fields: Any) -> dict[str, Any]:
        return action(key, now, state="started", owner=owner, lease_expires_at=lease, **fields)

    return [
        *settled_doubts(now)[:2],
        # Moved: a dead local owner (lease live or not), a claim of ours no thread runs, a
        # lapsed lease of another machine or of no owner at all.
        started("f", owners["gone"], live, tool="send_email"),
        started("g", owners["gone"], lapsed, attempt=2),
        started("h", owners["ours_gone"], live),
        started("i", "other-host/abcd1234/4242/777/1", lapsed, tool="refund"),
        started("j", None, lapsed),
        # Kept: a live lease elsewhere, and a lapsed one of a process that may still act.
        started("k", "other-host/abcd1234/4242/777/2", live),
        started("l", owners["alive"], lapsed),
        started("m", owners["ours_running"], lapsed),
    ]


def test_the_sweep_moves_the_same_actions_with_the_same_notes(
    tmp_path: Path, run: Any, owners: dict[str, str]
) -> None:
    now = time.time()
    twins = [new_ledger(tmp_path / f"{name}.db") for name in ("lean", "full")]
    for url in twins:
        put(url, *started_actions(now, owners))
    lean_url, full_url = twins
    # The first read of each sweeps: the table, evidence and exit code come out alike.
    lean = run("lean", "doubt", "--fail-if-any", "--url", lean_url)
    assert lean == run("full", "doubt", "--fail-if-any", "--url", full_url)
    assert lean[0] == 3
    table = lean[1]
    assert table.count("just now") == 5, table
    assert "died while running it" in table
    assert "stopped running it without" in table  # the rest is trimmed
    assert table.count("its lease expired with no result") == 3  # b, i and j
    # Both ledgers were left alike: the same actions moved, with the same notes and owners; the
    # moves' times are each route's own clock reading, a moment apart.
    lean_rows, full_rows = rows_of(lean_url), rows_of(full_url)
    assert [r["state"] for r in lean_rows] == ["in_doubt"] * 7 + ["started"] * 3
    for a, b in zip(lean_rows, full_rows, strict=True):
        assert abs(a.pop("updated_at") - b.pop("updated_at")) < CLOCK_SLACK
        assert a == b
    # Read again (nothing more to move), the JSON documents agree but for those moments.
    lean_json = json.loads(run("lean", "doubt", "--json", "--url", lean_url)[1])
    full_json = json.loads(run("full", "doubt", "--json", "--url", full_url)[1])
    assert len(lean_json) == 7
    for a, b in zip(lean_json, full_json, strict=True):
        a_at, b_at = a.pop("updated_at"), b.pop("updated_at")
        assert a_at == b_at or a["key"][0] in "fghij"
        assert a == b
    # A second read by the other route finds what the first left.
    assert run("full", "doubt", "--url", lean_url) == run("lean", "doubt", "--url", lean_url)


def test_a_writer_holding_the_ledger_is_waited_for(tmp_path: Path, run: Any) -> None:
    url = new_ledger(tmp_path / "ledger.db")
    now = time.time()
    put(url, action("n", now, state="started", owner="far/abcd1234/1/1/1", lease_expires_at=now))
    writer = sqlite3.connect(url.removeprefix("sqlite:///"), isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")
    writer.execute("UPDATE c4a_effects SET tool = 'charge_card'")
    done: list[Outcome] = []
    reader = threading.Thread(target=lambda: done.append(run("lean", "doubt", "--url", url)))
    reader.start()
    reader.join(0.5)
    writer.execute("COMMIT")  # the reader waited for the lock instead of failing
    writer.close()
    reader.join(60)
    [(code, out, err)] = done
    assert (code, err) == (0, "")
    assert "charge_card" in out
    assert "its lease expired with no result" in out


# -- what the lean route leaves to the full one ---------------------------------------------------


def test_errors_are_the_full_routes(tmp_path: Path, run: Any) -> None:
    url = new_ledger(tmp_path / "ledger.db")

    def version(number: int) -> None:
        with sqlite3.connect(tmp_path / "ledger.db") as conn:
            conn.execute("UPDATE c4a_schema SET version = ?", (number,))
        conn.close()

    empty = tmp_path / "empty.db"
    sqlite3.connect(empty).close()
    shared = new_ledger(tmp_path / "shared" / "ledger.db")
    (tmp_path / "shared" / "ledger.db").chmod(0o664)
    cases = {
        "no file": (f"sqlite:///{tmp_path / 'nope.db'}", "there is no ledger at"),
        "no tables": (f"sqlite:///{empty}", "there is no Call4Agents ledger at"),
        "a folder": (f"sqlite:///{tmp_path}", "refusing the ledger file"),
        "others may write it": (shared, "other users may write it (mode 664)"),
    }
    for name, (where, message) in cases.items():
        assert _lean.open_ledger(where) is None, name
        found = run("user", "doubt", "--url", where)
        assert found == run("full", "doubt", "--url", where), name
        assert found[0] == 2
        assert message in found[2], name
    for number, message in (
        (CURRENT + 1, "written by a newer Call4Agents"),
        (CURRENT - 1, "run `call4agents migrate`"),
    ):
        version(number)
        assert _lean.open_ledger(url) is None
        found = run("user", "doubt", "--json", "--url", url)
        assert found == run("full", "doubt", "--json", "--url", url)
        assert (found[0], found[1]) == (2, "")
        assert message in found[2]
    version(CURRENT)
    assert run("lean", "doubt", "--url", url)[0] == 0


def test_what_only_the_full_route_judges(
    tmp_path: Path, run: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = new_ledger(tmp_path / "ledger.db")
    found = run("user", "doubt", "--url", url, "--schema", "s1")
    assert found == run("full", "doubt", "--url", url, "--schema", "s1")
    assert "schema= applies to PostgreSQL ledgers only" in found[2]
    # Ledger refuses an ill-formed previous secret on opening; so does `doubt`, either way.
    monkeypatch.setenv("CALL4AGENTS_PREVIOUS_SECRET", "old-" + "y" * 40)
    found = run("user", "doubt", "--url", url)
    assert found == run("full", "doubt", "--url", url)
    assert "needs CALL4AGENTS_PREVIOUS_SECRET_UNTIL" in found[2]
    monkeypatch.setenv("CALL4AGENTS_PREVIOUS_SECRET_UNTIL", "2999-01-01T00:00:00+00:00")
    assert run("user", "doubt", "--url", url) == (0, "No actions in doubt.\n", "")
    # A folder on a network file system is refused unless allowed, by the full route's words.
    monkeypatch.delenv("CALL4AGENTS_PREVIOUS_SECRET")
    monkeypatch.setattr(_sqlite, "mount_fs_type", lambda path, mounts_text=None: "nfs4")
    found = run("user", "doubt", "--url", url)
    assert found == run("full", "doubt", "--url", url)
    assert "network file system (nfs4)" in found[2]
    monkeypatch.setenv("CALL4AGENTS_ALLOW_NETWORK_FS", "1")
    assert run("lean", "doubt", "--url", url) == (0, "No actions in doubt.\n", "")


def test_every_way_of_naming_an_sqlite_ledger(
    tmp_path: Path, run: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    new_ledger(tmp_path / ".c4a" / "ledger.db")
    put(f"sqlite:///{tmp_path / '.c4a' / 'ledger.db'}", *settled_doubts(time.time()))
    expected = run("full", "doubt")
    assert expected[0] == 0
    assert run("lean", "doubt") == expected  # the default path
    for url in (
        ".c4a/ledger.db",
        str(tmp_path / ".c4a" / "ledger.db"),
        "sqlite:///.c4a/ledger.db",
        f"sqlite+pysqlite:///{tmp_path / '.c4a' / 'ledger.db'}",
    ):
        assert run("lean", "doubt", "--url", url) == expected, url
        monkeypatch.setenv("CALL4AGENTS_URL", url)
        assert run("lean", "doubt") == expected, url
        monkeypatch.delenv("CALL4AGENTS_URL")
    # Forms the lean route leaves alone: the full route reads them as it always did.
    for url in (".c4a/ledger%2Edb", "sqlite:///.c4a/ledger.db?timeout=5"):
        assert _lean.sqlite_path(url) is None
        assert run("user", "doubt", "--url", url) == run("full", "doubt", "--url", url)


@pytest.mark.parametrize(
    "url",
    [
        "sqlite:///a/b.db",
        "sqlite:////abs/b.db",
        "sqlite:///~/b.db",
        "sqlite+pysqlite:///b.db",
        "sqlite:///a b#c@d:e+f.db",
        "sqlite:///zoë.db",
        "plain/path.db",
        "/abs/plain.db",
        "sqlite:///a%20b.db",
        "sqlite:///b.db?mode=ro",
        "sqlite:///",
        "sqlite://",
        "sqlite:///:memory:",
        "postgresql+psycopg://u@h/db",
        "SQLITE:///b.db",
    ],
)
def test_the_lean_route_reads_a_url_as_the_full_one_does(url: str) -> None:
    lean = _lean.sqlite_path(url)
    if lean is None:
        return  # left to the full route
    parsed = _db.parse_url(url)
    assert parsed.get_backend_name() == "sqlite"
    assert not parsed.query
    assert lean == Path(parsed.database or "").expanduser()


def test_the_lean_route_does_not_import_sqlalchemy(tmp_path: Path) -> None:
    url = new_ledger(tmp_path / "ledger.db")
    now = time.time()
    put(url, *settled_doubts(now), action("z", now, state="started", lease_expires_at=now - 9))
    script = (
        "import sys\n"
        "from call4agents.facade.cli import main\n"
        "code = main(sys.argv[1:])\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] == 'sqlalchemy')\n"
        "print('LOADED', code, loaded, file=sys.stderr)\n"
    )
    for argv in (["doubt"], ["doubt", "--json", "--fail-if-any"]):
        done = subprocess.run(
            [sys.executable, "-c", script, *argv, "--url", url],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            env={k: v for k, v in os.environ.items() if k != "CALL4AGENTS_URL"},
        )
        expected = 3 if "--fail-if-any" in argv else 0
        assert done.stderr.strip() == f"LOADED {expected} []", done.stderr
        assert "TimeoutError: payment gateway" in done.stdout
    assert rows_of(url)[-1]["note"] == "its lease expired with no result"  # it swept, too
    # The same script does load it where the lean route cannot serve: the check can fail.
    done = subprocess.run(
        [sys.executable, "-c", script, "doubt", "--url", url, "--schema", "s"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert "'sqlalchemy'" in done.stderr.splitlines()[-1]


# -- the statements, one by one, beside their SQLAlchemy twins ------------------------------------


def test_the_connection_is_set_up_as_the_engines(tmp_path: Path) -> None:
    url = new_ledger(tmp_path / "ledger.db")
    ledger = c4a.Ledger(url, auto_migrate=False)
    lean = _lean.open_ledger(url)
    assert lean is not None
    try:
        with ledger.engine.connect() as conn:
            engine_conn: Any = conn.connection.driver_connection
            for pragma in ("journal_mode", "synchronous", "busy_timeout"):
                mine = lean._conn.execute(f"PRAGMA {pragma}").fetchone()
                assert mine == engine_conn.execute(f"PRAGMA {pragma}").fetchone(), pragma
            assert lean._conn.isolation_level == engine_conn.isolation_level
        assert lean._conn.execute("PRAGMA busy_timeout").fetchone() == (30000,)
        clock = lean._conn.execute(f"SELECT {_sqlite.NOW}").fetchone()[0]
        assert abs(clock - ledger.store.now()) < CLOCK_SLACK
        assert abs(clock - time.time()) < 60
    finally:
        lean.close()
        ledger.close()
    # The command line's Ledger opens with its defaults, which the lean route takes too.
    defaults = c4a.Ledger.__init__.__kwdefaults__ or {}
    assert defaults["busy_timeout"] == _sqlite.BUSY_TIMEOUT
    assert defaults["durability"] == _lean._DURABILITY


def test_the_reads_read_what_the_stores_reads_read(tmp_path: Path, owners: dict[str, str]) -> None:
    url = new_ledger(tmp_path / "ledger.db")
    put(url, *started_actions(time.time(), owners), *settled_doubts(time.time())[2:])
    ledger = c4a.Ledger(url)
    lean = _lean.open_ledger(url)
    assert lean is not None
    try:
        expected = [
            (key, attempt, owner, None if lapsed is None else bool(lapsed))
            for key, attempt, owner, lapsed in reads.started(ledger.store)
        ]
        got = [
            (k, a, o, None if lapsed is None else bool(lapsed))
            for k, a, o, lapsed in lean.started()
        ]
        assert got == expected
        assert len(got) == 8
        assert lean.in_doubt() == [dict(m) for m in reads.in_doubt(ledger.store)]
        assert len(lean.in_doubt()) == 4
    finally:
        lean.close()
        ledger.close()


MARKS = {
    # name: (the row's lease, only_if_expired, owner passed, attempt passed, state)
    "dead owner": ("live", False, "same", 1, "started"),
    "lapsed lease": ("lapsed", True, "same", 1, "started"),
    "lease renewed meanwhile": ("live", True, "same", 1, "started"),
    "no lease": (None, True, "same", 1, "started"),
    "owner not judged": ("live", False, None, 1, "started"),
    "adopted by another owner": ("lapsed", True, "other", 1, "started"),
    "another attempt now": ("lapsed", True, "same", 2, "started"),
    "settled meanwhile": ("lapsed", False, "same", 1, "succeeded"),
}


OWNED = "far/abcd1234/7/7/1"


def marking_rows(case: str, now: float) -> list[dict[str, Any]]:
    """Two alike actions, p and q, as MARKS[case] leaves them: one for each route to mark."""
    lease, _, _, _, state = MARKS[case]
    leases = {"live": now + 3600, "lapsed": now - 60, None: None}
    return [action(k, now, state=state, owner=OWNED, lease_expires_at=leases[lease]) for k in "pq"]


def mark_both(case: str, lean: Any, ledger: c4a.Ledger) -> bool:
    """Mark p by the lean route and q by the store, as MARKS[case] asks (closing both): the two
    agree, and move the action only where its lease lapsed or its owner died."""
    _, only_if_expired, owner, attempt, _ = MARKS[case]
    given = {"same": OWNED, "other": "far/abcd1234/8/8/1", None: None}[owner]
    try:
        by_lean = lean.mark_in_doubt(
            "p" * 64, attempt, "why", only_if_expired=only_if_expired, owner=given
        )
        by_store = ledger.store.mark_in_doubt(
            "q" * 64, attempt, "why", only_if_expired=only_if_expired, owner=given
        )
    finally:
        lean.close()
        ledger.close()
    assert by_lean == by_store
    assert by_lean == (case in ("dead owner", "lapsed lease", "owner not judged"))
    return by_lean


def assert_marked_alike(rows: list[dict[str, Any]], now: float, moved: bool) -> None:
    """p and q read alike afterwards, but for their keys, and were changed only if moved."""
    p, q = rows
    for row in (p, q):
        del row["seq"], row["key"]
        assert (row.pop("updated_at") > now - 100) == moved
    assert p == q


@pytest.mark.parametrize("case", list(MARKS))
def test_marking_in_doubt_does_what_the_stores_mark_does(tmp_path: Path, case: str) -> None:
    url = new_ledger(tmp_path / "ledger.db")
    now = time.time()
    put(url, *marking_rows(case, now))
    lean = _lean.open_ledger(url)
    assert lean is not None
    moved = mark_both(case, lean, c4a.Ledger(url))
    assert_marked_alike(rows_of(url), now, moved)
