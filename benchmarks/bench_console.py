"""Server time per console page, with many tickets waiting and many recorded actions.

    .venv/bin/python benchmarks/bench_console.py [--tickets N] [--actions N] [--in-doubt N]
                                              [--audit N] [--rounds N] [--postgres URL]
                                              [--never-analyzed] [--issue]

Each backend gets a fresh ledger: one ticket and one action made through the library, then
copies of them made inside the database (see ``seed``) up to ``--tickets`` pending approval
tickets asked over the last day and ``--actions`` recorded actions in runs of 50 spread over the
last 30 days, ``--in-doubt`` of them in doubt, each run with a cost and a completion time, and
``--audit`` decisions over the same days (``--never-analyzed``: SQLite without planner
statistics, as a ledger is until something analyzes it; every page should cost about the same).
``--issue`` takes the sizes issue #46 sets: 1,000,000 actions, 10,000 waiting tickets, 1,000 in
doubt and 100,000 audit entries, each page under 300 ms. Each page is then requested through
the app in this process (Starlette's test client: routing, ledger reads and rendering, no
network) ``--rounds`` times; the table prints the median and the worst.

The floor beside each page is the bare driver reading what that page must read at least (the
rows it shows, in its order, through SQLAlchemy Core on the ledger's own connection): the
inbox's first page of pending tickets and their count, the in-doubt queue's first page, the
most recently active runs, one run's actions and tickets, the audit's newest entries, and the
hourly figures of the health page's day. A page is marked when its median misses the target.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy import func, select, text
from starlette.testclient import TestClient

import call4agents as c4a
from call4agents.console import ConsoleSettings
from call4agents.console._serve import app_to_serve
from call4agents.storage import _db, news, tally
from call4agents.storage.run_rows import COMPLETED_AT
from call4agents.storage.tables import approvals, audit, effects, run_tallies, tallies

sys.path.insert(0, str(Path(__file__).parent))  # run as a script: bench_scale sits beside it
from bench_scale import analyze as fresh_statistics

RUN_SIZE = 50  # actions per run in the bulk copy
SPREAD_DAYS = 30  # how far back the copies go
TARGET_MS = 300.0  # issue #46: every page, at its sizes
ISSUE = {"actions": 1_000_000, "tickets": 10_000, "in_doubt": 1_000, "audit": 100_000}
# Each page, and the floor it is set beside (see ``floors``).
PAGES = {
    "/": "inbox",
    "/doubt": "doubt",
    "/doubt?tool=refund&why=lease&age=1h": "doubt",
    "/runs": "runs",
    "/runs?active=all": "runs",
    "/run?id=bulk-1": "run",
    "/health?since=1h": "health",
    "/health": "health",
    "/health?since=7d": "health",
    "/health?since=all": "health",
    "/api/live": "inbox",
    "/?tool=refund&sort=newest": "inbox",
    "/?view=cards": "inbox",
    "/?q=wait&waited=1h&kind=irreversible": "inbox",
    "/audit": "audit",
    "/audit?by=person-7": "audit",
    "/audit?action=did_not_happen": "audit",
    "/audit?run=bulk-5": "audit",
    "/audit?tool=refund&since=7d": "audit",
    "/audit?since=1h": "audit",
}
# The pages deep in a list (``deep_pages``), by label, and their floors.
DEEP = {
    "/?after=(halfway down)": "inbox",
    "/runs?active=all&before=(300 down)": "runs",
    "/audit?before=(halfway down)": "audit",
    "/audit?format=csv (10,000 rows)": "audit",
}
TOKEN = "bench-token"


def seed(
    ledger: c4a.Ledger,
    tickets: int,
    actions: int,
    audited: int,
    analyze: bool = True,
    in_doubt: int = 20,
) -> None:
    """One real ticket and one real action through the library, then copies of each made inside
    the database (a recursive CTE on SQLite, generate_series on PostgreSQL), as
    bench_scale.py fills: a million actions through the API would take an hour and measure the
    writes. Copied tickets keep the template's signature, so they would not verify if decided;
    no page verifies a ticket to show it."""
    c4a.init(ledger)

    @c4a.effect(name="refund", kind="irreversible", approval=True, redact=("card",))
    def refund(order: int, card: str) -> str:
        return f"refunded {order}"

    @c4a.effect(name="send_email", kind="write")
    def send_email(to: str, n: int) -> dict[str, str]:
        return {"id": f"msg-{n}"}

    with c4a.run("wait-template"), contextlib.suppress(c4a.ApprovalRequired):
        refund(0, card="4242-4242-4242-4242")
    with c4a.run("bulk-1"):
        send_email("bob@example.com", 0)
    with ledger.store.tx() as conn:
        [action] = conn.execute(select(effects)).mappings().all()
        [ticket] = conn.execute(select(approvals)).mappings().all()
    pg = ledger.dialect == "postgresql"
    now = float(action["created_at"])
    with ledger.engine.begin() as conn:
        if ledger.schema:  # the statements name tables bare
            conn.execute(text(f'SET LOCAL search_path TO "{ledger.schema}"'))
        tally.drop_triggers(conn)  # the log below holds each bulk row once
        if pg:
            news.drop_triggers(conn)  # no news for the bulk rows
        for table in ("c4a_changes", "c4a_tallies", "c4a_run_tallies"):  # counted afresh below
            conn.execute(text(f"DELETE FROM {table}"))
        for statement in _fill_sql(pg, tickets - 1, actions - 1, now, audited, in_doubt):
            conn.execute(
                text(statement),
                {
                    "args": action["args"],
                    "result": action["result"],
                    "targs": ticket["args"],
                    "sig": ticket["signature"],
                    "kind": ticket["kind"],
                    "asked": ticket["asked_by"],
                },
            )
        tally.log_everything(conn)
        tally.create_triggers(conn)
        if pg:
            news.create_triggers(conn)
    tally.after_folding(ledger.store, lambda conn: None)  # as the first read would
    if pg or analyze:
        tables = ("effects", "approvals", "run_counters", "run_tallies", "tallies", "audit")
        fresh_statistics(ledger, *tables)


def _series(pg: bool, n: int) -> str:
    if pg:
        return f"FROM generate_series(1, {n}) AS s(i)"
    return (
        "FROM (WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s "
        f"WHERE i < {n}) SELECT i FROM s)"
    )


def _fill_sql(
    pg: bool, tickets: int, actions: int, now: float, audited: int, in_doubt: int
) -> list[str]:
    """Pending tickets asked over the last day; actions over the last SPREAD_DAYS days in runs
    of RUN_SIZE, ``in_doubt`` of them in doubt, each run with a cost and a completion time; a
    minute of repeats for every minute of the span; decisions by 40 people over the same days,
    one in 1,000 a settlement that says an action did not happen."""

    def txt(expr: str) -> str:
        return f"({expr})::text" if pg else f"CAST({expr} AS TEXT)"

    def num(expr: str) -> str:
        return f"({expr})::float8" if pg else f"CAST({expr} AS REAL)"

    key = "lpad(i::text, 64, '0')" if pg else "printf('%064d', i)"  # no real key is all digits
    # A waiting ticket's tool has not run: its key names no recorded action.
    ticket_key = "'f' || " + ("lpad(i::text, 63, '0')" if pg else "printf('%063d', i)")
    span = SPREAD_DAYS * 86400.0
    every = max(actions // max(in_doubt, 1), 1)
    at = f"{now} - {num('i')} * {span / max(actions, 1)}"
    runs = max(actions // RUN_SIZE, 1)
    minutes = int(span // 60)
    return [
        "INSERT INTO c4a_approvals (ticket, key, for_attempt, run_id, tool, args, state, "
        "requested_at, expires_at, signature, asked_by, kind) "
        f"SELECT 'apr_bulk' || {txt('i')}, {ticket_key}, 1, 'wait-' || {txt('i')}, 'refund', "
        f":targs, 'pending', {now} - {num('i')} * {86400.0 / max(tickets, 1)}, {now + 30 * 86400}, "
        f":sig, :asked, :kind {_series(pg, tickets)}",
        "INSERT INTO c4a_effects (key, run_id, tool, kind, state, attempt, args, result, note, "
        "created_at, updated_at) "
        f"SELECT {key}, 'bulk-' || {txt(f'i / {RUN_SIZE} + 1')}, 'send_email', 'write', "
        f"CASE WHEN i % {every} = 7 THEN 'in_doubt' ELSE 'succeeded' END, 1, :args, "
        f"CASE WHEN i % {every} = 7 THEN NULL ELSE :result END, "
        f"CASE WHEN i % {every} = 7 THEN 'its lease expired with no result' END, "
        f"{at}, {at} {_series(pg, actions)}",
        "INSERT INTO c4a_run_counters (run_id, name, value) "
        f"SELECT 'bulk-' || {txt('i + 1')}, 'cost', {num('i % 100')} / 100 {_series(pg, runs)}",
        "INSERT INTO c4a_run_counters (run_id, name, value) "
        f"SELECT 'bulk-' || {txt('i + 1')}, '{COMPLETED_AT}', "
        f"{now} - {num('i')} * {span / runs} {_series(pg, runs)}",
        "INSERT INTO c4a_changes (run_id, name, new_value, created_at) "
        f"SELECT '', 'deduped', i % 3, ({int(now // 60)} - i) * 60 {_series(pg, minutes)}",
        "INSERT INTO c4a_audit (at, actor, action, run_id, tool, key, ticket) "
        f"SELECT {now} - {num('i')} * {span / max(audited, 1)}, 'person-' || {txt('i % 40')}, "
        "CASE WHEN i % 1000 = 3 THEN 'did_not_happen' WHEN i % 2 = 0 THEN 'approved' "
        f"ELSE 'denied' END, 'bulk-' || {txt(f'i / {RUN_SIZE} + 1')}, 'refund', {key}, "
        f"'apr_audit' || {txt('i')} {_series(pg, audited)}",
    ]


def timed(fn: Callable[[], object], rounds: int) -> tuple[float, float]:
    fn()  # warm-up
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples), max(samples)


def floors(ledger: c4a.Ledger) -> dict[str, Callable[[], object]]:
    """What each page must read at least, by the bare driver on the ledger's own connection."""
    day = (time.time() - 86400) // 3600 * 3600
    reads = {
        "inbox": [
            select(approvals)
            .where(approvals.c.state == "pending")
            .order_by(approvals.c.requested_at, approvals.c.ticket)
            .limit(25),
            select(func.count()).where(approvals.c.state == "pending"),
        ],
        "doubt": [
            select(effects)
            .where(effects.c.state == "in_doubt")
            .order_by(effects.c.updated_at, effects.c.key)
            .limit(25),
        ],
        "runs": [select(run_tallies).order_by(run_tallies.c.last_at.desc()).limit(100)],
        "run": [
            select(effects).where(effects.c.run_id == "bulk-1").order_by(effects.c.seq),
            select(approvals).where(approvals.c.run_id == "bulk-1"),
        ],
        "audit": [select(audit).order_by(audit.c.at.desc(), audit.c.id.desc()).limit(50)],
        "health": [select(tallies).where(tallies.c.step == 3600, tallies.c.at >= day)],
    }

    def read(statements: list[Any]) -> Callable[[], object]:
        def run() -> object:
            with ledger.store.read() as conn:
                return [conn.execute(statement).all() for statement in statements]

        return run

    return {name: read(statements) for name, statements in reads.items()}


def measure(name: str, url: str, schema: str | None, args: argparse.Namespace) -> dict[str, Any]:
    ledger = c4a.Ledger(url, schema=schema)
    started = time.perf_counter()
    seed(
        ledger,
        args.tickets,
        args.actions,
        args.audit,
        analyze=not args.never_analyzed,
        in_doubt=args.in_doubt,
    )
    print(
        f"{name}: seeded {args.tickets:,} tickets, {args.actions:,} actions ({args.in_doubt:,} "
        f"in doubt) and {args.audit:,} decisions in {time.perf_counter() - started:.1f}s",
        file=sys.stderr,
    )
    # As `call4agents console` serves it (what was loaded set aside from the collector).
    app = app_to_serve(ledger, ConsoleSettings(operator="bench", token=TOKEN))
    found: dict[str, Any] = {
        f"floor: {floor}": timed(read, args.rounds) for floor, read in floors(ledger).items()
    }
    with TestClient(app, base_url="http://127.0.0.1") as client:
        client.get(f"/?token={TOKEN}")
        for label, path in [*((p, p) for p in PAGES), *deep_pages(ledger, args.audit).items()]:

            def get(path: str = path) -> object:
                answer = client.get(path)
                assert answer.status_code == 200, (path, answer.status_code, answer.text[:300])
                return answer

            found[label] = timed(get, args.rounds)
    ledger.close()
    return found


def deep_pages(ledger: c4a.Ledger, audited: int) -> dict[str, str]:
    """A page halfway down the inbox, one 300 runs down the runs list and one halfway down the
    audit, by label: keyset paging should cost there what it costs on the first page."""
    _, waiting = ledger.waiting_page(limit=1)
    middle, _ = ledger.waiting_page(limit=max(1, waiting // 2))
    runs = ledger.runs(limit=300, active_within=None)
    decisions = ledger.audit(limit=max(1, audited // 2))
    found = {"/?after=(halfway down)": f"/?after={middle[-1].ticket}"} if middle else {}
    if runs:
        last = runs[-1]
        found["/runs?active=all&before=(300 down)"] = (
            f"/runs?active=all&before_at={last.last_at!r}&before_run={last.run_id}"
        )
    if decisions:
        found["/audit?before=(halfway down)"] = f"/audit?before={decisions[-1].id}"
        found["/audit?format=csv (10,000 rows)"] = "/audit?format=csv"
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tickets", type=int, default=1000)
    parser.add_argument("--actions", type=int, default=50_000)
    parser.add_argument("--audit", type=int, default=20_000, help="decisions in the audit")
    parser.add_argument("--in-doubt", type=int, default=20, help="actions in doubt")
    parser.add_argument(
        "--issue",
        action="store_true",
        help="issue #46's sizes: 1,000,000 actions, 10,000 tickets, 1,000 in doubt, 100,000 "
        "decisions (overrides the sizes given)",
    )
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument(
        "--never-analyzed",
        action="store_true",
        help="leave SQLite without planner statistics (no ANALYZE, no PRAGMA optimize)",
    )
    parser.add_argument("--postgres", default=os.environ.get("CALL4AGENTS_TEST_POSTGRES_URL"))
    args = parser.parse_args()
    if args.issue:
        for size, value in ISSUE.items():
            setattr(args, size, value)
    if args.never_analyzed:
        _db.optimize_sqlite = lambda conn, **_: None  # as a ledger nobody analyzed
    os.environ.setdefault("CALL4AGENTS_SECRET", "bench-secret-" + "x" * 40)
    results: dict[str, dict[str, Any]] = {}
    with LoadWatch() as load:
        with tempfile.TemporaryDirectory() as folder:
            url = f"sqlite:///{Path(folder) / 'ledger.db'}"
            results["sqlite"] = measure("sqlite", url, None, args)
        if args.postgres:
            schema = "c4a_bench_" + uuid.uuid4().hex[:10]
            try:
                results["postgresql"] = measure("postgresql", args.postgres, schema, args)
            finally:
                _drop(args.postgres, schema)
    report(results, args, load.text())


def _drop(url: str, schema: str) -> None:
    import sqlalchemy

    engine = sqlalchemy.create_engine(url)
    with engine.begin() as conn:
        conn.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
    engine.dispose()


class LoadWatch:
    """The machine's 1-minute load average, sampled every few seconds while the pages are timed:
    on a shared machine the figures mean little without it."""

    def __init__(self) -> None:
        import threading

        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> LoadWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(0 if not self.samples else 5.0):
            self.samples.append(os.getloadavg()[0])

    def text(self) -> str:
        if not self.samples:
            return "load average: not sampled"
        low, high = min(self.samples), max(self.samples)
        mean = statistics.mean(self.samples)
        return (
            f"1-minute load average during the run: {low:.1f} to {high:.1f} "
            f"(mean {mean:.1f}), {os.cpu_count()} CPUs"
        )


def report(results: dict[str, dict[str, Any]], args: argparse.Namespace, load: str = "") -> None:
    backends = list(results)
    print(
        f"console pages, {args.tickets:,} pending tickets, {args.actions:,} actions "
        f"({args.in_doubt:,} in doubt), {args.audit:,} audit entries, {args.rounds} rounds: "
        f"median / worst ms; floor: the bare read of what the page shows; target "
        f"{TARGET_MS:.0f} ms a page"
    )
    if load:
        print(load)
    header = f"{'page':<40}" + "".join(f"{'floor ' + b:>18}{b:>22}" for b in backends)
    print(header)
    for page in results[backends[0]]:
        if page.startswith("floor: "):
            continue
        cells, missed = "", []
        for b in backends:
            floor = results[b].get(f"floor: {({**PAGES, **DEEP}).get(page)}", (float("nan"), 0))[0]
            median, worst = results[b][page]
            cells += f"{floor:>18.1f}{median:>12.1f} / {worst:>7.1f}"
            if median > TARGET_MS:
                missed.append(b)
        print(
            f"{page:<40}{cells}"
            + (f"  over {TARGET_MS:.0f} ms: {', '.join(missed)}" if missed else "")
        )


if __name__ == "__main__":
    main()
