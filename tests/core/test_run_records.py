"""A run's own records (``c4a_run_counters`` under ``run.``): read once as an entry begins,
written in one statement as it ends, and summed without losing an entry when several workers
end entries of the same run at once."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import event

import call4agents as c4a
from call4agents.engine.run_notes import run_document
from call4agents.storage import run_controls, run_rows, tally
from tests.conftest import Target

WORKERS, ENTRIES = 4, 25


@contextmanager
def statements(ledger: c4a.Ledger) -> Iterator[list[str]]:
    """The statements the ledger sends while the block runs (BEGIN and COMMIT are not sent as
    statements)."""
    sent: list[str] = []

    def note(conn: object, cursor: object, statement: str, *args: object) -> None:
        sent.append(statement)

    event.listen(ledger.engine, "before_cursor_execute", note)
    try:
        yield sent
    finally:
        event.remove(ledger.engine, "before_cursor_execute", note)


def test_entering_reads_once_and_leaving_writes_once(target: Target) -> None:
    """What keeps a run's start and end at about one action's cost: one read as it is entered,
    which also spares its first action the look for a recorded result, and one statement as it
    leaves (on PostgreSQL its own transaction)."""
    ledger = c4a.init(target.open())

    @c4a.effect(name="send")
    def send(to: str) -> str:
        return f"sent {to}"

    block = c4a.run("one", ledger=ledger, trigger="user")
    with statements(ledger) as entering:
        block.__enter__()
    with statements(ledger) as acting:
        send("bob")
    with statements(ledger) as leaving:
        block.__exit__(None, None, None)
    assert len(entering) == 1
    assert len(acting) == 2  # the intent and the result: no read first in a run with no actions
    assert len(leaving) == 1
    assert "c4a_run_counters" in leaving[0]
    document = run_document(ledger, "one")
    assert document is not None
    assert (document["triggers"], document["tool_calls"], document["completed"]) == (
        ["user"],
        1,
        True,
    )


def test_entries_ended_at_once_by_many_workers_all_count(target: Target) -> None:
    """Workers (each its own ledger, as processes are) end entries of one run at the same time:
    every entry's tool calls, reads and time are in the sums, none lost to another's write."""
    ledgers = [target.open() for _ in range(WORKERS)]
    start = threading.Barrier(WORKERS)
    failures: list[BaseException] = []

    def worker(ledger: c4a.Ledger) -> None:
        try:
            start.wait()
            for _ in range(ENTRIES):
                history = run_rows.history(ledger.store, "shared")
                run_rows.add_entry(
                    ledger.store,
                    "shared",
                    history=history,
                    trigger="webhook",
                    wall_clock_ms=2.0,
                    tool_calls=3,
                    reads=1,
                    completed=True,
                )
        except BaseException as exc:  # reported by the test below
            failures.append(exc)

    threads = [threading.Thread(target=worker, args=(ledger,)) for ledger in ledgers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not failures
    values = run_controls.counted(ledgers[0].store, ["shared"])[0]["shared"]
    entries = WORKERS * ENTRIES
    assert values[run_rows.TOOL_CALLS] == 3 * entries
    assert values[run_rows.READS] == entries
    assert values[run_rows.WALL_CLOCK_MS] == 2.0 * entries
    assert run_rows.triggers(ledgers[0].store, "shared") == ["webhook"]  # kept once
    # The figures folded from the change log count the run once, at its final tool calls.
    total, _ = tally.after_folding(ledgers[0].store, lambda conn: tally.totals(conn, None))
    assert tally.named(total, tally.BY_CALLS) == {str(3 * entries): 1}
    assert tally.named(total, tally.BY_TRIGGER) == {"webhook": 1}
