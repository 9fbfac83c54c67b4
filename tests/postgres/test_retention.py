"""Retention at scale: `gc` over 200,000 actions works in short batches while workers go on."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from sqlalchemy import event

import call4agents as c4a
from tests.conftest import Target
from tests.postgres.helpers import admin

ROWS = 200_000
OPEN = 100  # the first rows are in doubt (but every 20th, failed): never touched
IN_DOUBT = OPEN - OPEN // 20


def fill(target: Target) -> None:
    """ROWS old actions, as a busy ledger holds them: 1 in 20 failed, the rest succeeded."""
    with admin(target) as conn:
        conn.execute(
            f'INSERT INTO "{target.schema}".c4a_effects (key, run_id, tool, kind, state, '
            "attempt, args, result, error, created_at, updated_at) "
            "SELECT encode(sha256(('old-' || i)::bytea), 'hex'), 'run-' || (i / 20), "
            "'agent.send_email', 'write', "
            "CASE WHEN i %% 20 = 0 THEN 'failed' WHEN i <= %s THEN 'in_doubt' "
            "ELSE 'succeeded' END, 1, '{\"to\":\"user' || i || '@example.com\"}', "
            "'{\"id\":' || i || '}', NULL, old, old "
            "FROM generate_series(1, %s) AS s(i), "
            "LATERAL (SELECT extract(epoch FROM now()) - 2 * 86400 + i * 0.001 AS old) AS t",
            (OPEN, ROWS),
        )
        conn.execute(f'ANALYZE "{target.schema}".c4a_effects')


def test_gc_of_a_large_ledger_runs_in_batches_beside_workers(pg_target: Target) -> None:
    worker, collector = pg_target.open(), pg_target.open()

    @c4a.effect(name="send_email", ledger=worker)
    def send_email(to: str) -> str:
        return f"sent to {to}"

    with c4a.run("pruned-later", ledger=worker):
        send_email("old@example.com")
    with admin(pg_target) as conn:  # make that real action two days old too
        conn.execute(
            f'UPDATE "{pg_target.schema}".c4a_effects SET updated_at = updated_at - 2 * 86400'
        )
    fill(pg_target)

    batches: list[int] = []
    event.listen(collector.engine, "commit", lambda *_: batches.append(1))
    reports: list[Any] = []
    gc = threading.Thread(target=lambda: reports.append(collector.gc(3600, batch=1000)))
    during: list[int] = []  # how many gc transactions had committed as each action finished
    gc.start()
    with c4a.run("beside-gc", ledger=worker):
        i = 0
        while gc.is_alive():
            send_email(f"new{i}@example.com")
            during.append(len(batches))
            i += 1
    gc.join()

    [report] = reports
    failed = ROWS // 20
    pruned = ROWS - failed - IN_DOUBT + 1  # and the real action made two days old
    assert (report.pruned, report.deleted, report.kept_open) == (pruned, failed, IN_DOUBT)
    assert len(batches) >= ROWS // 1000  # short transactions, a thousand rows at most each
    # Workers finished actions while gc was part-way: it never held them up for its whole run.
    assert any(0 < n < len(batches) for n in during), (during[:5], len(batches))
    fresh = worker.effects("beside-gc")
    assert all(r.state == "succeeded" and r.pruned_at is None for r in fresh)  # new: untouched

    # The tombstone keeps its promise: the pruned action is not run again.
    view = pg_target.open()
    with c4a.run("pruned-later", ledger=view), pytest.raises(c4a.Call4AgentsError, match="gc"):
        c4a.effect(name="send_email", ledger=view)(lambda to: "again")("old@example.com")


def test_gc_never_deletes_an_action_a_worker_just_took_up(pg_target: Target) -> None:
    """A failed action, picked by gc, is taken as a new attempt before gc deletes it."""
    worker, collector = pg_target.open(lease=30), pg_target.open()
    inside, go = threading.Event(), threading.Event()
    runs: list[str] = []

    @c4a.effect(name="charge", ledger=worker)
    def charge(order: str) -> str:
        runs.append(order)
        if len(runs) == 1:
            raise ValueError("card declined")  # failed: did not act, may run again
        inside.set()
        go.wait(30)
        return f"charged {order}"

    with c4a.run("retry", ledger=worker), pytest.raises(ValueError):
        charge("o-1")
    with admin(pg_target) as conn:
        conn.execute(
            f'UPDATE "{pg_target.schema}".c4a_effects SET updated_at = updated_at - 2 * 86400'
        )

    results: list[str] = []

    def retry() -> None:
        with c4a.run("retry", ledger=worker):
            results.append(charge("o-1"))

    def take_it_up_first(conn: Any, cursor: Any, statement: str, *rest: Any) -> None:
        if statement.lstrip().startswith("DELETE") and not inside.is_set():
            threading.Thread(target=retry).start()
            assert inside.wait(30)  # the new attempt's intent is committed; its tool runs

    event.listen(collector.engine, "before_cursor_execute", take_it_up_first)
    report = collector.gc(3600)
    go.set()
    deadline = threading.Event()
    while not results and not deadline.wait(0.05):
        pass
    assert report.deleted == 0
    assert results == ["charged o-1"]
    with c4a.run("retry", ledger=pg_target.open()):
        assert charge("o-1") == "charged o-1"  # recorded, so not charged a third time
    assert runs == ["o-1", "o-1"]
