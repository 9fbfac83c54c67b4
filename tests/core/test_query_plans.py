"""The queries the CLI and the gauges run are served by an index at any ledger size, on both
databases.

`doubt`, the lease sweep, the open-figures gauges and `doctor` ask for actions that are started or
in doubt: a handful among millions. The partial index ``c4a_effects_open`` holds only those, but
SQLite uses a partial index only when a query repeats its condition with the same literal values;
these tests record the statements the real operations send and ask each database for its plan.
Every command that reads a ledger (doubt, runs, show, stats, approvals) is run as a user runs it,
and no statement it sends may read a whole large table.
"""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, Table, delete, event, insert, text, update

import call4agents as c4a
from call4agents.controls import stats
from call4agents.facade.cli import main
from call4agents.storage import _db, tally
from call4agents.storage.run_rows import COMPLETED_AT, READS, TOOL_CALLS, TRIGGER
from call4agents.storage.tables import (
    approvals,
    audit,
    changes,
    effects,
    run_counters,
    run_tallies,
    runs,
    tallies,
)
from tests.conftest import Target, make_target

ROWS = 20_000
ANALYZED = True  # False while a test runs on a ledger never analyzed (see ``target``)


@pytest.fixture(params=["sqlite", "sqlite, never analyzed", "postgres"])
def target(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Target]:
    """A fresh ledger location on each backend; on SQLite also one whose statistics nobody ever
    gathered (neither the test nor the ledger's own `PRAGMA optimize`), as a ledger is until
    something analyzes it: the plans must be as good without them. PostgreSQL's autovacuum
    analyzes on its own."""
    never = request.param.endswith("never analyzed")
    if never:
        monkeypatch.setattr(__name__ + ".ANALYZED", False)
        monkeypatch.setattr(_db, "optimize_sqlite", lambda conn, **_: None)
    # Made from nothing: an emptied schema of an earlier test could hold its statistics.
    made = make_target(request.param.split(",")[0], tmp_path, new_schema=True)
    target = next(made)
    yield target
    for ledger in target.opened if never else []:
        with ledger.engine.connect() as conn:
            stat = "SELECT count(*) FROM sqlite_master WHERE name = 'sqlite_stat1'"
            assert conn.exec_driver_sql(stat).scalar_one() == 0, "the ledger was analyzed"
    next(made, None)


def _fill(ledger: c4a.Ledger) -> None:
    now = time.time()
    rows = [
        {
            "key": f"k{i:08d}",
            "run_id": f"run-{i // 10}",
            "tool": "t",
            "kind": "write",
            "state": "in_doubt" if i % 5000 == 0 else "succeeded",
            "attempt": 1,
            "args": "{}",
            "created_at": now,
            "updated_at": now,
        }
        for i in range(ROWS)
    ]
    _insert_analyzed(ledger, effects, rows)


def _insert_analyzed(ledger: c4a.Ledger, table: Table, rows: list[dict[str, Any]]) -> None:
    """The rows, then fresh statistics for the planners."""
    with ledger.engine.begin() as conn:
        conn.execute(insert(table), rows)
        _analyze(conn, ledger, table.name)


def _analyze(conn: Any, ledger: c4a.Ledger, *tables: str) -> None:
    """Fresh statistics for the planners, as an operator's ANALYZE would give them; nothing when
    the test asks for a ledger never analyzed (SQLite keeps none until someone asks)."""
    if ledger.dialect == "postgresql":
        prefix = f'"{ledger.schema}".' if ledger.schema else ""
        for table in tables:
            conn.execute(text(f"ANALYZE {prefix}{table}"))
    elif ANALYZED:
        conn.exec_driver_sql("ANALYZE")


def _sent(engine: Engine, operation: Callable[[], Any]) -> list[tuple[str, Any]]:
    seen: list[tuple[str, Any]] = []

    def record(_c: Any, _cur: Any, statement: str, params: Any, _ctx: Any, _many: bool) -> None:
        if statement.lstrip().upper().startswith("SELECT") and "c4a_effects" in statement:
            seen.append((statement, params))

    event.listen(engine, "before_cursor_execute", record)
    try:
        operation()
    finally:
        event.remove(engine, "before_cursor_execute", record)
    return seen


def _plan(engine: Engine, statement: str, params: Any) -> str:
    with engine.connect() as conn:
        if engine.dialect.name == "sqlite":
            rows = conn.exec_driver_sql("EXPLAIN QUERY PLAN " + statement, params).all()
            return "\n".join(str(r[-1]) for r in rows)
        rows = conn.exec_driver_sql("EXPLAIN " + statement, params).all()
        return "\n".join(str(r[0]) for r in rows)


@pytest.mark.slow
def test_open_action_queries_use_the_open_index(target: Target) -> None:
    ledger = target.open()
    _fill(ledger)
    operations: dict[str, Callable[[], Any]] = {
        "in_doubt": ledger.in_doubt,
        "sweep": ledger.sweep,
        "open_figures": lambda: stats.open_figures(ledger),
    }
    for name, operation in operations.items():
        sent = _sent(ledger.engine, operation)
        assert sent, f"{name} sent no query"
        for statement, params in sent:
            plan = _plan(ledger.engine, statement, params)
            # Either partial index: PostgreSQL may read the in-doubt ones by c4a_effects_doubt.
            assert re.search(r"c4a_effects_(open|doubt)", plan), f"{name}:\n{statement}\n{plan}"
            assert "SCAN c4a_effects\n" not in plan + "\n"
            assert "Seq Scan on c4a_effects" not in plan
    assert len(ledger.in_doubt()) == ROWS // 5000


def test_doctor_counts_open_actions(
    sqlite_target: Target, capsys: pytest.CaptureFixture[str]
) -> None:
    _fill(sqlite_target.open())
    assert main(["doctor", "--url", sqlite_target.url]) == 0
    assert "0 started, 4 in doubt" in capsys.readouterr().out


# Tables that grow with the work done. The others stay small by design: c4a_changes (emptied
# by each fold), c4a_runs (runs ended by a run control), c4a_schema and c4a_meta.
LARGE = (
    "c4a_effects",
    "c4a_approvals",
    "c4a_run_tallies",
    "c4a_run_counters",
    "c4a_tallies",
    "c4a_audit",
)


def _fill_more(ledger: c4a.Ledger) -> None:
    """Beside _fill's actions: times spread over days, approval tickets (all spent but a few), an
    escalated run, each run's counters (completed, cost, reads, tool calls, trigger), and the
    tallies folded from all that."""
    now = time.time()
    tickets = [
        {
            "ticket": f"t{i:08d}",
            "key": f"k{i:08d}",
            "for_attempt": 1,
            "run_id": f"run-{i // 2}",
            "tool": "t",
            "args": "{}",
            "state": "pending" if i % 2000 == 0 else "spent",
            "requested_at": now - i,
            "expires_at": now + 3600,
            "signature": "x",
        }
        for i in range(ROWS // 2)
    ]
    with ledger.engine.begin() as conn:
        # One action every 40 s over the last 9 days: an hour's window holds 90, a day's one
        # run in nine (the fold leaves the run tallies' rows wider and less in order than a
        # bulk copy would, and PostgreSQL rightly reads a table whole for half of its rows).
        ago = (ROWS - effects.c.seq) * 40.0
        conn.execute(update(effects).values(created_at=now - ago, updated_at=now - ago))
        conn.execute(insert(approvals), tickets)
        conn.execute(
            insert(runs).values(
                run_id="run-7", status="escalated", reason="r", created_at=now, updated_at=now
            )
        )
        conn.execute(insert(run_counters), _counters(now))
        # The log's times are the inserts': count the figures afresh from the moved rows.
        for table in (changes, tallies, run_tallies):
            conn.execute(delete(table))
        tally.log_everything(conn)
    tally.after_folding(ledger.store, lambda conn: None)
    with ledger.engine.begin() as conn:
        _analyze(conn, ledger, *LARGE, "c4a_runs")


def _counters(now: float) -> list[dict[str, Any]]:
    values = {
        COMPLETED_AT: lambda i: now - i * 100.0,
        "cost": lambda i: i % 97 / 10,
        READS: lambda i: i % 3,
        TOOL_CALLS: lambda i: i % 11,
        TRIGGER + "user": lambda i: now - i * 100.0,
        # A budget's per-tool counters: most of the table, as in a ledger of budgeted runs.
        **{f"tool:t{n}": lambda i: i % 5 for n in range(12)},
    }
    return [
        {"run_id": f"run-{i}", "name": name, "value": value(i)}
        for i in range(ROWS // 10)
        for name, value in values.items()
    ]


@dataclass
class Filled:
    """SQLite ledgers holding _fill's and _fill_more's rows, one analyzed and one never, each
    made in ``folder`` by the first test on this worker that asks for it (see _filled)."""

    folder: Path
    files: dict[bool, Path] = field(default_factory=dict)


@pytest.fixture(scope="module")
def filled(tmp_path_factory: pytest.TempPathFactory) -> Filled:
    return Filled(tmp_path_factory.mktemp("filled"))


def _filled(target: Target, made: Filled) -> c4a.Ledger:
    """The target's ledger opened with _fill's and _fill_more's rows in it.

    Filling and folding those rows takes most of a test's time, the same for every test that
    asks. On SQLite it is done once per worker and kind (analyzed or never), and each test gets
    a copy of that file, byte for byte what filling its own would have made: the tests change
    their copies, never the first. PostgreSQL ledgers are schemas, filled each time."""
    if target.backend != "sqlite":
        ledger = target.open()
        _fill(ledger)
        _fill_more(ledger)
        return ledger
    # Made here, not in the fixture: the test's settings (its secret; whether anything may
    # analyze the ledger) are in force by now.
    if ANALYZED not in made.files:
        first = made.folder / ("analyzed.db" if ANALYZED else "never-analyzed.db")
        ledger = c4a.Ledger(f"sqlite:///{first}")
        _fill(ledger)
        _fill_more(ledger)
        ledger.close()
        # Closed, the last connection wrote the log back into the file: the file is the whole.
        assert not first.with_name(first.name + "-wal").exists()
        made.files[ANALYZED] = first
    path = Path(target.url.removeprefix("sqlite:///"))
    shutil.copyfile(made.files[ANALYZED], path)
    return target.open()


def _every_select(operation: Callable[[], Any]) -> list[tuple[str, Any]]:
    """The SELECTs any engine sends while ``operation`` runs (the CLI opens its own)."""
    seen: list[tuple[str, Any]] = []

    def record(_c: Any, _cur: Any, statement: str, params: Any, _ctx: Any, _many: bool) -> None:
        if statement.lstrip().upper().startswith(("SELECT", "WITH")):
            seen.append((statement, params))

    event.listen(Engine, "before_cursor_execute", record)
    try:
        operation()
    finally:
        event.remove(Engine, "before_cursor_execute", record)
    return seen


def _whole_table_reads(plan: str, statement: str) -> list[str]:
    """Large tables the plan reads whole: SQLite's SCAN with no index, or walking an index end to
    end (a walk is fine only when it yields the order asked for and a LIMIT stops it early);
    PostgreSQL's Seq Scan."""
    walks_in_order = "LIMIT" in statement.upper() and "USE TEMP B-TREE" not in plan
    sqlite = [
        table
        for table, index in re.findall(r"^SCAN (\w+)( USING (?:COVERING )?INDEX \w+)?$", plan, re.M)
        if not (index and walks_in_order)
    ]
    postgres = re.findall(r"Seq Scan on (\w+)", plan)
    return [t for t in sqlite + postgres if t in LARGE]


@pytest.mark.slow
def test_every_reading_command_uses_indexes(
    target: Target, filled: Filled, capsys: pytest.CaptureFixture[str]
) -> None:
    ledger = _filled(target, filled)
    where = ["--url", target.url, *(["--schema", target.schema] if target.schema else [])]
    commands = {
        "doubt": ["doubt"],
        "runs": ["runs"],
        "show": ["show", "run-7"],
        "stats": ["stats"],
        "stats --since": ["stats", "--since", "1h"],
        "approvals": ["approvals"],
        "approvals --run": ["approvals", "--run", "run-0"],
    }
    checked = 0
    for name, command in commands.items():
        sent = _every_select(lambda command=command: main([*command, *where]))
        assert sent, f"{name} sent no query"
        for statement, params in sent:
            if not any(table in statement for table in LARGE):
                continue
            plan = _plan(ledger.engine, statement, params)
            assert not _whole_table_reads(plan, statement), f"{name}:\n{statement}\n{plan}"
            checked += 1
    assert checked >= 10
    out = capsys.readouterr().out
    assert "Run ended: escalated" in out


@pytest.mark.slow
def test_run_figures_fold_and_read_by_keys(target: Target, filled: Filled) -> None:
    """Folding counter changes into the run tallies looks each run's tally up by its key, and
    reading the figures takes a range of the tallies' key, on a large ledger."""
    ledger = c4a.init(_filled(target, filled))
    # A run entered again and two new ones: their counters' changes wait in the log.
    for run_id in ("run-0", "new-1", "new-2"):
        with c4a.run(run_id, trigger="user", budget=c4a.Budget(max_cost=100)):
            c4a.record_model_usage(10, 1, cost=0.5)
    seen: list[tuple[str, Any]] = []

    def record(_c: Any, _cur: Any, statement: str, params: Any, _ctx: Any, _many: bool) -> None:
        if statement.lstrip().upper().startswith("SELECT") and any(
            t in statement for t in ("c4a_run_tallies", "c4a_tallies")
        ):
            seen.append((statement, params))

    event.listen(Engine, "before_cursor_execute", record)
    try:
        figures = stats._every_run(ledger)
    finally:
        event.remove(Engine, "before_cursor_execute", record)
    assert figures.completed == ROWS // 10 + 2
    assert any("c4a_run_tallies" in statement for statement, _ in seen)  # the runs' tallies
    for statement, params in seen:
        plan = _plan(ledger.engine, statement, params)
        assert not _whole_table_reads(plan, statement), f"{statement}\n{plan}"
        if ledger.dialect == "sqlite":
            assert "SEARCH c4a_" in plan, f"{statement}\n{plan}"  # by the primary key


def _action(key: str, run_id: str, now: float, **changed: Any) -> dict[str, Any]:
    """A row of c4a_effects: a write that succeeded at ``now``, but for what ``changed`` says."""
    row = {
        "key": key,
        "run_id": run_id,
        "tool": "t",
        "kind": "write",
        "state": "succeeded",
        "attempt": 1,
        "args": "{}",
        "created_at": now,
        "updated_at": now,
    }
    return {**row, **changed}


def test_runs_lists_the_runs_changed_last(target: Target) -> None:
    """``runs`` walks the index newest first, across pages and ties, and agrees with a count."""
    ledger = target.open()
    now = time.time()
    rows = [
        _action(
            f"k{i:06d}",
            f"run-{i % 1500}",
            now,
            state="failed" if i % 7 == 0 else "succeeded",
            updated_at=now + (i // 3) * 0.5,  # three rows share each time
        )
        for i in range(6000)
    ]
    with ledger.engine.begin() as conn:
        conn.execute(insert(effects), rows)
    found = ledger.runs(limit=1200)
    last = {}
    for row in rows:
        last[row["run_id"]] = max(last.get(row["run_id"], 0.0), row["updated_at"])
    expected = sorted(last.values(), reverse=True)[:1200]
    assert [r.last_at for r in found] == pytest.approx(expected)
    assert len({r.run_id for r in found}) == 1200
    one = next(r for r in found if r.run_id == "run-1499")
    assert (one.actions, one.failed + one.succeeded) == (4, 4)


def test_runs_goes_on_past_many_actions_changed_at_one_time(target: Target) -> None:
    """More actions than one step reads (2,000) share one time, each its own run: the next
    step goes on after the last row read, so none of them is skipped or listed twice."""
    ledger = target.open()
    now = time.time()
    rows = [_action(f"t{i:06d}", f"tied-{i}", now) for i in range(4500)]
    with ledger.engine.begin() as conn:
        conn.execute(insert(effects), rows)
    found = ledger.runs(limit=4000)
    assert len(found) == len({r.run_id for r in found}) == 4000


def _ticket_number() -> Any:
    """The number in _fill_more's ticket ids ("t00000042" is 42), as SQL."""
    from sqlalchemy import Integer, cast, func

    return cast(func.substr(approvals.c.ticket, 2), Integer)


@pytest.mark.slow
def test_figures_over_time_read_only_their_window(target: Target, filled: Filled) -> None:
    # The console's health charts: every statement of stats.series (and of the count of actions
    # executed without a yes, windowed and all time) reads through an index.
    ledger = _filled(target, filled)
    # Tickets asked one every 6 minutes over 40 days, each open for 10 minutes: a day's window
    # holds a few hundred of them.
    now = time.time()
    with ledger.engine.begin() as conn:
        asked = now - _ticket_number() * 360.0
        conn.execute(update(approvals).values(requested_at=asked, expires_at=asked + 600))
        _analyze(conn, ledger, "c4a_approvals")
    operations: dict[str, Callable[[], Any]] = {
        "series 1h": lambda: stats.series(ledger, 3600, 12),
        "series 24h": lambda: stats.series(ledger, 86400, 24),
        "unapproved 1h": lambda: stats.unapproved_executions(ledger, 3600),
        "unapproved all": lambda: stats.unapproved_executions(ledger),
        "series 1h, all time too": lambda: stats.series(ledger, 3600, 12, ever=True),
    }
    checked = 0
    for name, operation in operations.items():
        sent = _every_select(operation)
        assert sent, f"{name} sent no query"
        for statement, params in sent:
            if not any(table in statement for table in LARGE):
                continue
            plan = _plan(ledger.engine, statement, params)
            reads = _whole_table_reads(plan, statement)
            if name in ("unapproved all", "series 1h, all time too"):
                # All time asks about every ticket ever opened (their keys, from an index on
                # SQLite), and looks each one's action up by key: never every action.
                reads = [t for t in reads if t != "c4a_approvals"]
            assert not reads, f"{name}:\n{statement}\n{plan}"
            checked += 1
    assert checked >= 8


@pytest.mark.slow
def test_console_pages_read_by_index(target: Target, filled: Filled) -> None:
    """The console's inbox and runs pages, filtered, sorted and paged deep, on a large ledger:
    each statement is served by an index (a page deep in the list costs what the first does)."""
    ledger = _filled(target, filled)
    pending = ledger.waiting_page(limit=3)[0]
    assert pending, "the ledger has tickets waiting"
    older = ledger.runs(limit=100)[-1]
    reads: dict[str, Callable[[], Any]] = {
        "inbox": lambda: ledger.waiting_page(),
        "inbox next": lambda: ledger.waiting_page(after=pending[-1].ticket),
        "inbox newest": lambda: ledger.waiting_page(c4a.WaitingFilter(sort="newest")),
        "inbox expiring": lambda: ledger.waiting_page(c4a.WaitingFilter(sort="expiring")),
        "inbox filtered": lambda: ledger.waiting_page(
            c4a.WaitingFilter(tool="t", kind="write", search="run-", older_than=60)
        ),
        # 20 to a page as `runs` lists: at 100, the 1,000 actions of those runs are 5% of this
        # test's ledger, and PostgreSQL rightly reads a table that small whole instead.
        "runs next": lambda: ledger.runs(limit=20, before=older),
    }
    for name, read in reads.items():
        sent = _every_select(read)
        assert sent, f"{name} sent no query"
        for statement, params in sent:
            if any(table in statement for table in LARGE):
                plan = _plan(ledger.engine, statement, params)
                assert not _whole_table_reads(plan, statement), f"{name}:\n{statement}\n{plan}"
    page = ledger.runs(limit=100, before=older)
    assert len(page) == 100
    assert page[0].last_at <= older.last_at
    assert older.run_id not in {r.run_id for r in page}


def _fill_audit(ledger: c4a.Ledger) -> float:
    """ROWS decisions over 30 days, newest last: 40 people, 8 tools, 2,000 runs; a "did not
    happen" is rare (one in 1,000), as a settlement is. Returns the newest entry's time."""
    now = time.time()
    rows = [
        {
            "at": now - (ROWS - i) * 130.0,
            "actor": f"person-{i % 40}",
            "action": "did_not_happen" if i % 1000 == 3 else ("approved", "denied")[i % 2],
            "run_id": f"run-{i % 2000}",
            "tool": f"tool-{i % 8}",
            "key": f"{i:064d}",
            "ticket": f"t{i:08d}",
        }
        for i in range(ROWS)
    ]
    _insert_analyzed(ledger, audit, rows)
    return now


@pytest.mark.slow
def test_the_audit_reads_by_index(target: Target) -> None:
    """The audit page and command, whole, deep and by each filter: each read is a range of an
    index that also gives its order, however deep the page or however rare the match."""
    ledger = target.open()
    now = _fill_audit(ledger)
    middle = ledger.audit(limit=ROWS // 2)[-1].id
    reads: dict[str, Callable[[], Any]] = {
        "newest": lambda: ledger.audit(limit=50),
        "halfway down": lambda: ledger.audit(limit=50, before=middle),
        "by a person": lambda: ledger.audit(by="person-7", limit=50),
        "a rare action": lambda: ledger.audit(action="did_not_happen", limit=50),
        "one run": lambda: ledger.audit(run_id="run-1234", limit=50),
        "one tool, deep": lambda: ledger.audit(tool="tool-3", before=middle, limit=50),
        "the last hour": lambda: ledger.audit(since=now - 3600, limit=50),
        "a rare action this week": lambda: ledger.audit(
            action="did_not_happen", since=now - 7 * 86400, limit=50
        ),
    }
    for name, read in reads.items():
        sent = [(st, p) for st, p in _every_select(read) if "c4a_audit" in st]
        assert sent, f"{name} sent no query"
        for statement, params in sent:
            plan = _plan(ledger.engine, statement, params)
            assert not _whole_table_reads(plan, statement), f"{name}:\n{statement}\n{plan}"
            # The index gives the order: no sort of everything the filter matched.
            assert "USE TEMP B-TREE" not in plan, f"{name}:\n{statement}\n{plan}"


@pytest.mark.slow
def test_the_in_doubt_queue_and_the_inbox_lines_read_by_index(
    target: Target, filled: Filled
) -> None:
    """The console's in-doubt queue, whole, deep and by each filter, is a range of
    ``c4a_effects_doubt``, in the order that index gives (no sort of every action in doubt);
    the inbox's mark of a superseded ticket is one read of the page's runs by
    ``c4a_approvals_run``."""
    from call4agents.engine.approvals import superseded

    ledger = _filled(target, filled)
    now = time.time()
    doubt = [
        {
            "key": f"d{i:08d}",
            "run_id": f"doubt-{i // 4}",
            "tool": f"tool-{i % 8}",
            "kind": "write",
            "state": "in_doubt",
            "attempt": 1,
            "args": "{}",
            "note": "lease expired" if i % 3 else "TimeoutError: no answer",
            "created_at": now - 86400,
            "updated_at": now - 86400 + i * 60.0,
        }
        for i in range(1000)
    ]
    _insert_analyzed(ledger, effects, doubt)
    first, total = ledger.in_doubt_page(limit=500)
    assert total == 1000 + ROWS // 5000
    reads: dict[str, Callable[[], Any]] = {
        "queue": lambda: ledger.in_doubt_page(),
        "queue deep": lambda: ledger.in_doubt_page(after=first[-1].key),
        "queue filtered": lambda: ledger.in_doubt_page(
            c4a.DoubtFilter(tool="tool-3", run_id="doubt-", reason="lease", older_than=300)
        ),
    }
    for name, read in reads.items():
        sent = [(st, p) for st, p in _every_select(read) if "c4a_effects.state = 'in_doubt'" in st]
        assert len(sent) == 2, f"{name}: a page and its count, not {sent}"
        for statement, params in sent:
            plan = _plan(ledger.engine, statement, params)
            # A walk of the whole partial index reads the actions in doubt alone: never a scan
            # of the table or of another index.
            assert "c4a_effects_doubt" in plan, f"{name}:\n{statement}\n{plan}"
            assert "Seq Scan" not in plan, f"{name}:\n{statement}\n{plan}"
            assert not re.search(r"^SCAN c4a_effects$", plan, re.M), f"{name}:\n{plan}"
            assert "USE TEMP B-TREE" not in plan, f"{name}:\n{statement}\n{plan}"
    pending, _ = ledger.waiting_page(limit=25)
    sent = _every_select(lambda: superseded(ledger, pending))
    assert len(sent) == 1, sent  # one read for the whole page
    for statement, params in sent:
        plan = _plan(ledger.engine, statement, params)
        assert "c4a_approvals_run" in plan, f"{statement}\n{plan}"
        assert not _whole_table_reads(plan, statement), f"{statement}\n{plan}"
