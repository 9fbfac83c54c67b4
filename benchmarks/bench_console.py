"""Server time per console page, with many tickets waiting and many recorded actions.

    uv run python benchmarks/bench_console.py [--tickets N] [--actions N] [--rounds N]
                                              [--postgres URL]

Each backend gets a fresh ledger: ``--tickets`` pending approval tickets opened through the
library (each signed, as agents open them), then ``--actions`` recorded actions bulk-copied from
one real row over many runs spread over the last 30 days, a few of them in doubt. Each page is
then requested through the app in this process (Starlette's test client: routing, ledger reads
and rendering, no network) ``--rounds`` times; the table prints the median and the worst. The
issue's target is 10,000 tickets and 1,000,000 actions under 100 ms a page; the defaults are
smaller so a run stays short.

The floor beside the pages is the bare driver reading what the inbox must read at least: the
pending tickets, oldest first, in one query on the same database.
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

from sqlalchemy import insert, select, text
from starlette.testclient import TestClient

import call4agents as c4a
from call4agents.console import ConsoleSettings, create_app
from call4agents.storage.tables import approvals, effects

RUN_SIZE = 50  # actions per run in the bulk copy
SPREAD_DAYS = 30  # how far back the copies go
PAGES = (
    "/",
    "/doubt",
    "/runs",
    "/runs?active=all",
    "/run?id=bulk-1",
    "/health",
    "/health?since=all",
    "/api/live",
)
TOKEN = "bench-token"


def seed(ledger: c4a.Ledger, tickets: int, actions: int) -> None:
    c4a.init(ledger)

    @c4a.effect(name="refund", kind="irreversible", approval=True, redact=("card",))
    def refund(order: int, card: str) -> str:
        return f"refunded {order}"

    @c4a.effect(name="send_email", kind="write")
    def send_email(to: str, n: int) -> dict[str, str]:
        return {"id": f"msg-{n}"}

    for i in range(tickets):
        with c4a.run(f"wait-{i}"), contextlib.suppress(c4a.ApprovalRequired):
            refund(i, card="4242-4242-4242-4242")
    with c4a.run("bulk-1"):
        send_email("bob@example.com", 0)
    _bulk_copy(ledger, actions - 1)


def _bulk_copy(ledger: c4a.Ledger, count: int) -> None:
    """Copies of the one real action, over runs of RUN_SIZE; one in 500 left in doubt."""
    with ledger.store.tx() as conn:
        [template] = conn.execute(select(effects)).mappings().all()
    base = {k: v for k, v in template.items() if k != "seq"}
    batch: list[dict[str, Any]] = []
    for i in range(count):
        doubt = i % 500 == 7
        # Spread over the last SPREAD_DAYS days, newest first, as a ledger in use would be.
        at = base["created_at"] - SPREAD_DAYS * 86400.0 * i / max(count, 1)
        batch.append(
            {
                **base,
                "created_at": at,
                "updated_at": at,
                "key": uuid.uuid4().hex + uuid.uuid4().hex,
                "run_id": f"bulk-{(i + 1) // RUN_SIZE + 1}",
                "state": "in_doubt" if doubt else "succeeded",
                "note": "its lease expired with no result" if doubt else None,
                "result": None if doubt else base["result"],
            }
        )
        if len(batch) == 5000:
            _insert(ledger, batch)
    _insert(ledger, batch)


def _insert(ledger: c4a.Ledger, batch: list[dict[str, Any]]) -> None:
    if batch:
        with ledger.store.tx() as conn:
            conn.execute(insert(effects), batch)
        batch.clear()


def timed(fn: Callable[[], object], rounds: int) -> tuple[float, float]:
    fn()  # warm-up
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples), max(samples)


def floor(ledger: c4a.Ledger) -> Callable[[], object]:
    query = (
        select(approvals).where(approvals.c.state == "pending").order_by(approvals.c.requested_at)
    )

    def read() -> object:
        with ledger.store.read() as conn:
            return conn.execute(query).all()

    return read


def measure(name: str, url: str, schema: str | None, args: argparse.Namespace) -> dict[str, Any]:
    ledger = c4a.Ledger(url, schema=schema)
    started = time.perf_counter()
    seed(ledger, args.tickets, args.actions)
    print(
        f"{name}: seeded {args.tickets:,} tickets and {args.actions:,} actions in "
        f"{time.perf_counter() - started:.1f}s",
        file=sys.stderr,
    )
    app = create_app(ledger, ConsoleSettings(operator="bench", token=TOKEN))
    found: dict[str, Any] = {
        "floor: pending tickets, bare query": timed(floor(ledger), args.rounds)
    }
    with TestClient(app, base_url="http://127.0.0.1") as client:
        client.get(f"/?token={TOKEN}")
        for path in PAGES:

            def get(path: str = path) -> object:
                answer = client.get(path)
                assert answer.status_code == 200, (path, answer.status_code, answer.text[:300])
                return answer

            found[path] = timed(get, args.rounds)
    ledger.close()
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tickets", type=int, default=1000)
    parser.add_argument("--actions", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--postgres", default=os.environ.get("CALL4AGENTS_TEST_POSTGRES_URL"))
    args = parser.parse_args()
    os.environ.setdefault("CALL4AGENTS_SECRET", "bench-secret-" + "x" * 40)
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as folder:
        results["sqlite"] = measure("sqlite", f"sqlite:///{Path(folder) / 'ledger.db'}", None, args)
    if args.postgres:
        schema = "c4a_bench_" + uuid.uuid4().hex[:10]
        try:
            results["postgresql"] = measure("postgresql", args.postgres, schema, args)
        finally:
            _drop(args.postgres, schema)
    report(results, args)


def _drop(url: str, schema: str) -> None:
    import sqlalchemy

    engine = sqlalchemy.create_engine(url)
    with engine.begin() as conn:
        conn.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
    engine.dispose()


def report(results: dict[str, dict[str, Any]], args: argparse.Namespace) -> None:
    backends = list(results)
    print(
        f"console pages, {args.tickets:,} pending tickets, {args.actions:,} actions, "
        f"{args.rounds} rounds: median / worst ms"
    )
    header = f"{'page':<40}" + "".join(f"{b:>22}" for b in backends)
    print(header)
    for page in results[backends[0]]:
        cells = "".join(
            f"{results[b][page][0]:>12.1f} / {results[b][page][1]:>7.1f}" for b in backends
        )
        print(f"{page:<40}{cells}")


if __name__ == "__main__":
    main()
