"""The one way the ledger counts: a change log, a fold, and the tallies it fills.

Three writers append to ``c4a_changes``, and nothing else does: a trigger on ``c4a_effects`` (an
action inserted, deleted, or changing state or attempt), a trigger on ``c4a_run_counters`` (a
counter the alert figures read: a run completed, its reads crossing 0, its tool calls or cost,
a trigger it was entered with), both in the writer's own transaction, so a crash keeps the row
and its change together or neither; and the repeats counted in memory (``DedupCounter``),
added every few seconds. Appending locks no row another worker needs.

``fold_batch`` moves the oldest changes into ``c4a_tallies``, each figure all time and, for
those with a time, by minute and by hour (so a window is read as a few hundred rows), and into
``c4a_run_tallies``, the per-run figures; it deletes them as it reads them, one fold at a time.
Whoever reads the figures folds first (``after_folding``). Every move is a difference (what a
row adds now, less what it added before), so changes folded in any order, as PostgreSQL may
commit them, add up to the same figures. Rows written with the triggers off (a bulk load) are
counted by logging each as inserted (``log_everything``).
"""

from __future__ import annotations

import atexit
import contextlib
import math
import threading
import weakref
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from sqlalchemy import (
    ColumnElement,
    Connection,
    Select,
    case,
    delete,
    func,
    insert,
    null,
    or_,
    select,
    text,
)

from call4agents.model import platform
from call4agents.model.errors import LedgerError

from .dialects import dialect_of, qualified
from .run_rows import COMPLETED_AT, READS, TOOL_CALLS, TRIGGER
from .run_rows import COST as COST  # a budget's counter: what the run spent
from .store import Store
from .tables import changes, effects, run_counters, run_tallies, tallies

T = TypeVar("T")
STATES = ("started", "succeeded", "failed", "in_doubt")
STEPS = (60, 3600)  # the timeline's minute and hour (``_file``); step 0 holds each all time
# Rows folded per transaction: a SQLite fold holds the write lock while it runs, so a long
# backlog (a ledger nobody read figures from for a while) goes in short steps.
BATCH = 20_000
# Filed under the time the action fell in doubt or left it, not when it was first attempted.
DOUBT_IN, DOUBT_OUT = "doubt_in", "doubt_out"
DEDUPED = "deduped"  # repeats served from the record, filed under when they were written
COMPLETED, WITH_READ = "runs_completed", "runs_completed_with_read"
BY_TRIGGER, BY_CALLS, BY_COST = "runs_trigger:", "tool_calls:", "cost:"
Filed = tuple[int, int, str]  # step, start of the minute or hour (0 all time), name


@dataclass
class RunTally:
    """One run's figures (a difference of them, while folding)."""

    actions: int = 0
    failed: int = 0
    irreversible: int = 0  # attempts of irreversible tools
    completed: int = 0  # the run's completion counter: 0 or 1
    has_read: int = 0  # its reads counter is above 0: 0 or 1
    last_at: float | None = None  # when its latest action was first attempted

    def plus(self, other: RunTally, sign: int = 1) -> RunTally:
        return RunTally(
            self.actions + sign * other.actions,
            self.failed + sign * other.failed,
            self.irreversible + sign * other.irreversible,
            self.completed + sign * other.completed,
            self.has_read + sign * other.has_read,
            _later(self.last_at, other.last_at),
        )

    def figures(self) -> Counter[str]:
        """What this run adds to the ledger-wide figures."""
        done = self.completed > 0
        return Counter(
            {
                "runs": int(self.actions > 0),
                "runs_failed": int(self.failed > 0),
                COMPLETED: int(done),
                WITH_READ: int(done and self.has_read > 0),
            }
        )


def _later(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else max(a, b)


def two_figures(value: float) -> float:
    """``value`` to two significant figures, as the cost histogram files it."""
    return float(f"{value:.2g}") + 0.0  # + 0.0: -0.0 files as 0


def _number(value: float) -> str:
    # Exact for any count of tool calls and any two-figure cost; "12", not "12.0".
    return format(value, ".15g")


# -- the log and its triggers ----------------------------------------------------------------

_COLUMNS = "run_id, name, old_state, old_value, new_state, new_value, created_at, at"
_ACTION_NOW = "NEW.state, NEW.attempt, NEW.created_at, NEW.updated_at"


def _watched(row: str) -> str:
    """The counters the figures read (substr, not LIKE: exact and case-sensitive on both)."""
    names = ", ".join(f"'{n}'" for n in (COMPLETED_AT, READS, TOOL_CALLS, COST))
    return f"({row}.name IN ({names}) OR substr({row}.name, 1, {len(TRIGGER)}) = '{TRIGGER}')"


# For each table, when each of its triggers fires and what it appends (``{now}``: the database's
# clock, as a delete has no time of its own in the row). A change of state or attempt moves an
# action's figures (renewing a lease or pruning does not); of the counters, those the figures
# read, and of their updates only reads crossing 0 and tool calls or cost changing (a trigger's
# or a completion's value is a time).
_LOGGED: dict[str, dict[str, tuple[str | None, str]]] = {
    "c4a_effects": {
        "INSERT": (None, "NEW.run_id, NEW.kind, NULL, NULL, " + _ACTION_NOW),
        "UPDATE OF state, attempt": (
            "OLD.state <> NEW.state OR OLD.attempt <> NEW.attempt",
            "NEW.run_id, NEW.kind, OLD.state, OLD.attempt, " + _ACTION_NOW,
        ),
        "DELETE": (
            None,
            "OLD.run_id, OLD.kind, OLD.state, OLD.attempt, NULL, NULL, OLD.created_at, {now}",
        ),
    },
    "c4a_run_counters": {
        "INSERT": (
            _watched("NEW"),
            "NEW.run_id, NEW.name, NULL, NULL, NULL, NEW.value, NULL, NULL",
        ),
        "UPDATE OF value": (
            f"(NEW.name = '{READS}' AND (OLD.value > 0) <> (NEW.value > 0)) OR "
            f"(NEW.name IN ('{TOOL_CALLS}', '{COST}') AND OLD.value <> NEW.value)",
            "NEW.run_id, NEW.name, NULL, OLD.value, NULL, NEW.value, NULL, NULL",
        ),
        "DELETE": (
            _watched("OLD"),
            "OLD.run_id, OLD.name, NULL, OLD.value, NULL, NULL, NULL, NULL",
        ),
    },
}


def _trigger(table: str, event: str) -> str:
    return f"{table}_tally_{event.split()[0].lower()}"


def create_triggers(conn: Connection) -> None:
    """The triggers that append to ``c4a_changes``: on SQLite one per table and operation; on
    PostgreSQL the same, each calling its table's function, so a row the figures do not read
    (most of a budget's counters) never calls it."""
    pg = conn.dialect.name == "postgresql"
    log = qualified(conn, changes.name)
    now = dialect_of(conn.dialect.name).now_text
    for table, logged in _LOGGED.items():
        function = qualified(conn, f"{table}_tally")
        if pg:
            branches = "".join(
                f"{'ELSIF' if i else 'IF'} TG_OP = '{event.split()[0]}' THEN "
                f"INSERT INTO {log} ({_COLUMNS}) VALUES ({row.format(now=now)});\n"
                for i, (event, (_, row)) in enumerate(logged.items())
            )
            conn.execute(
                text(
                    f"CREATE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql AS $$\n"
                    f"BEGIN\n{branches}END IF;\nRETURN NULL;\nEND\n$$"
                )
            )
        for event, (when, row) in logged.items():
            body = (
                f"EXECUTE FUNCTION {function}()"
                if pg
                else f"BEGIN INSERT INTO {log} ({_COLUMNS}) VALUES ({row.format(now=now)}); END"
            )
            conn.execute(
                text(
                    f"CREATE TRIGGER {_trigger(table, event)} AFTER {event} ON "
                    f"{qualified(conn, table)} FOR EACH ROW "
                    f"{'' if when is None else f'WHEN ({when}) '}{body}"
                )
            )


def drop_triggers(conn: Connection) -> None:
    """The log's triggers, for a bulk load that logs its rows itself (``log_everything``)."""
    for table, logged in _LOGGED.items():
        if conn.dialect.name == "postgresql":  # the function goes with every trigger calling it
            conn.execute(
                text(f"DROP FUNCTION IF EXISTS {qualified(conn, table + '_tally')}() CASCADE")
            )
            continue
        for event in logged:
            conn.execute(text(f"DROP TRIGGER IF EXISTS {_trigger(table, event)}"))


def log_repeats(conn: Connection, hits: int) -> None:
    """Repeats served from the record, now: the fold files them as ``deduped``."""
    conn.execute(
        insert(changes).values(
            run_id="", name=DEDUPED, new_value=hits, created_at=dialect_of(conn.dialect.name).now()
        )
    )


FLUSH_AFTER = 5.0  # seconds a count may wait in memory
_TAKE_AT = 10_000  # repeats noted before they are added up: bounds the list


class DedupCounter:
    """Repeats served from the record, on their way to the change log.

    A repeat costs microseconds and writes nothing to its action's row, so it cannot afford a
    database write of its own. Each one is noted in memory (one list append, no lock), added up
    under a lock now and then; a timer writes the count to the change log (``log_repeats``) a
    few seconds later in one short transaction, and ``Ledger.close()`` and interpreter exit write
    what is left. A process killed with SIGKILL loses at most the last few seconds of counts: a
    health figure, never part of the once-only guarantee.
    """

    def __init__(self, store: Store) -> None:
        self._store = store
        self._lock = threading.Lock()
        # One entry per repeat. Appending is atomic and needs no lock (a third of a repeat's
        # cost went on taking one); only _take removes entries, from the front, under the lock,
        # so an entry appended meanwhile is never lost.
        self._noted: list[None] = []
        self.pending = 0  # repeats added up and not yet written, under the lock
        # Whether this process's flush timer is armed. A fork's child has no timer thread (and
        # maybe a lock some other thread held): _after_fork starts it afresh. Kept as a flag
        # rather than comparing os.getpid() on each repeat, which is a system call.
        self._armed = False
        _counters.add(self)

    def add(self) -> None:
        noted = self._noted
        noted.append(None)
        if not self._armed or len(noted) >= _TAKE_AT:
            self._settle()

    def _settle(self) -> None:
        with self._lock:
            self.take()
            if not self._armed:
                self._armed = True
                timer = threading.Timer(FLUSH_AFTER, self._flush_quietly)
                timer.daemon = True
                timer.start()

    def take(self) -> None:
        """Add the repeats noted so far to ``pending`` (the caller holds the lock)."""
        taken = len(self._noted)
        self.pending += taken
        del self._noted[:taken]

    def flush(self) -> None:
        """Write the count held in memory to the ledger now."""
        with self._lock:
            self.take()
            pending, self.pending = self.pending, 0
            self._armed = False
        if not pending:
            return
        try:
            with self._store.tx() as conn:
                log_repeats(conn, pending)
        except LedgerError:
            with self._lock:  # the database is away: keep them for the next flush
                self.pending += pending
            raise

    def _flush_quietly(self) -> None:
        with contextlib.suppress(LedgerError):  # kept in memory; the next repeat tries again
            self.flush()


_counters: weakref.WeakSet[DedupCounter] = weakref.WeakSet()


def _after_fork() -> None:
    """In a fork's child: no timer runs there, a lock held at the fork stays held, and the
    counts held are the parent's, which the parent writes itself."""
    for counter in list(_counters):
        counter._lock = threading.Lock()
        counter._noted = []
        counter.pending = 0
        counter._armed = False


platform.at_fork(after_in_child=_after_fork)


@atexit.register
def _flush_at_exit() -> None:
    for counter in list(_counters):
        counter._flush_quietly()


def log_everything(conn: Connection) -> None:
    """Log every action and every counter the figures read as just inserted, so the next folds
    count them (after a bulk load made with the triggers off)."""
    columns = ["run_id", "name", "new_state", "new_value", "created_at", "at"]
    e, c = effects.c, run_counters.c
    watched = or_(
        c.name.in_((COMPLETED_AT, READS, TOOL_CALLS, COST)),
        func.substr(c.name, 1, len(TRIGGER)) == TRIGGER,
    )
    each = [
        select(e.run_id, e.kind, e.state, e.attempt, e.created_at, e.updated_at),
        select(c.run_id, c.name, null(), c.value, null(), null()).where(watched),
    ]
    for rows in each:
        conn.execute(insert(changes).from_select(columns, rows))


# -- folding ---------------------------------------------------------------------------------


def _adds(
    action: bool, name: str, state: str | None, value: float | None
) -> tuple[list[tuple[str, int]], RunTally]:
    """What one action (``name`` its kind, ``value`` its attempt) or one counter (``name`` at
    ``value``), or repeats, add to the figures and to the run's tally; None: absent."""
    run = RunTally()
    if value is None:
        return [], run
    if action:
        attempt = int(value)
        run.actions, run.failed = 1, int(state == "failed")
        found = [("actions:" + str(state), 1), ("retried", int(attempt > 1))]
        found.append(("executions", attempt))
        if name == "irreversible":
            found.append(("irreversible", attempt))
            run.irreversible = attempt
        return found, run
    if name == DEDUPED:
        return [(DEDUPED, int(value))], run
    if name == TOOL_CALLS:
        return [(BY_CALLS + _number(value), 1)], run
    if name == COST:
        return [(BY_COST + _number(two_figures(value)), 1)], run
    if name.startswith(TRIGGER):
        return [(BY_TRIGGER + name[len(TRIGGER) :], 1)], run
    run.completed = int(name == COMPLETED_AT)
    run.has_read = int(name == READS and value > 0)
    return [], run


def _lock(conn: Connection) -> None:
    """One fold at a time (SQLite: the write transaction already is)."""
    if conn.dialect.name == "postgresql":
        # Conflicts with itself, not with plain reads of the tallies.
        conn.execute(text(f"LOCK TABLE {qualified(conn, tallies.name)} IN EXCLUSIVE MODE"))


def fold_batch(conn: Connection, limit: int = BATCH) -> int:
    """Fold up to ``limit`` changes into the tallies, inside the caller's write transaction;
    returns how many were folded. Deleting and reading them is one statement, so a change
    committed meanwhile is either in this batch or left for the next, never lost or doubled."""
    _lock(conn)
    c = changes.c
    oldest = select(c.id).order_by(c.id).limit(limit)
    rows = conn.execute(
        delete(changes)
        .where(c.id.in_(oldest))
        .returning(
            c.run_id, c.name, c.old_state, c.old_value, c.new_state, c.new_value, c.created_at, c.at
        )
    ).all()
    # By the minute each move is filed under (None: all time only, a counter's), then by name.
    moves: Counter[tuple[int | None, str]] = Counter()
    moved: dict[str, RunTally] = {}
    for run_id, name, old_state, old_value, new_state, new_value, created_at, at in rows:
        action = old_state is not None or new_state is not None
        gained, run_gained = _adds(action, name, new_state, new_value)
        lost, run_lost = _adds(action, name, old_state, old_value)
        minute = None if created_at is None else int(created_at // 60) * 60
        for figure, n in gained:
            moves[(minute, figure)] += n
        for figure, n in lost:
            moves[(minute, figure)] -= n
        if action and (old_state == "in_doubt") != (new_state == "in_doubt"):
            moves[(int(at // 60) * 60, DOUBT_IN if new_state == "in_doubt" else DOUBT_OUT)] += 1
        if new_state is not None:
            run_gained.last_at = created_at
        if run_gained != run_lost:
            moved[run_id] = moved.get(run_id, RunTally()).plus(run_gained).plus(run_lost, -1)
    for figure, n in _fold_runs(conn, moved).items():
        moves[(None, figure)] += n
    _file(conn, moves)
    return len(rows)


def _file(conn: Connection, moves: Counter[tuple[int | None, str]]) -> None:
    """Add the moves to the tallies all time and, those with a minute, by minute and by hour."""
    filed: Counter[Filed] = Counter()
    for (minute, name), n in moves.items():
        if n:
            filed[(0, 0, name)] += n
            if minute is not None:
                filed[(60, minute, name)] += n
                filed[(3600, minute // 3600 * 3600, name)] += n
    rows = [{"step": s, "at": a, "name": n, "value": v} for (s, a, n), v in filed.items() if v]
    if rows:
        upsert(conn, tallies, rows, ["step", "at", "name"], add=True)


def _fold_runs(conn: Connection, moved: dict[str, RunTally]) -> Counter[str]:
    """Move each run's tally by its difference; returns what that moves of the ledger-wide run
    figures. A run with no action, completion or read left has no row."""
    before = runs_of(conn, moved, every=True)
    found: Counter[str] = Counter()
    kept: list[dict[str, Any]] = []
    gone: list[str] = []
    for run_id, delta in moved.items():
        old = before.get(run_id, RunTally())
        new = old.plus(delta)
        if not new.actions:  # a run left with a completion or a read but no action (deleted)
            new.last_at = None
        found.update(new.figures())
        found.subtract(old.figures())
        if new.actions or new.completed or new.has_read:  # failures need actions, as do attempts
            kept.append({"run_id": run_id, **new.__dict__})
        elif run_id in before:
            gone.append(run_id)
    for among in dialect_of(conn.dialect.name).among(run_tallies.c.run_id, gone):
        conn.execute(delete(run_tallies).where(among))
    if kept:
        upsert(conn, run_tallies, kept, ["run_id"], add=False)
    return found


def upsert(
    conn: Connection, table: Any, rows: list[dict[str, Any]], key: list[str], *, add: bool
) -> None:
    """Write ``rows`` into ``table`` in one statement: each row new by its ``key`` columns is
    inserted, and an existing one takes the other columns' values, or (``add``) adds them."""
    stmt = dialect_of(conn.dialect.name).insert(table)
    columns = [c.name for c in table.columns if c.name not in key]
    new = {c: table.c[c] + stmt.excluded[c] if add else stmt.excluded[c] for c in columns}
    conn.execute(stmt.on_conflict_do_update(index_elements=key, set_=new), rows)


def after_folding(store: Store, read: Callable[[Connection], T]) -> tuple[T, int]:
    """``read`` in the transaction that folded the last changes into the tallies (a batch at a
    time, each batch its own transaction), with 0. Where this database user may not write,
    ``read`` as of the last fold, with how many changes wait to be counted."""
    try:
        while True:
            with store.tx() as conn:
                if fold_batch(conn) < BATCH:
                    return read(conn), 0
    except LedgerError:
        with store.read() as conn:
            return read(conn), count_changes(conn)


def count_changes(conn: Connection) -> int:
    return int(conn.execute(select(func.count()).select_from(changes)).scalar_one())


# -- reading ---------------------------------------------------------------------------------


def between(conn: Connection, step: int, start: int, end: int | None) -> list[tuple[int, str, int]]:
    """The tallies of one step filed at ``start`` or later (and before ``end``): start of the
    minute or hour, name, value; a range of the primary key."""
    t = tallies.c
    stmt = select(t.at, t.name, t.value).where(
        t.step == step, t.at >= start, *([] if end is None else [t.at < end])
    )
    return [(int(at), str(name), int(value)) for at, name, value in conn.execute(stmt).all()]


def totals(conn: Connection, start: float | None) -> Counter[str]:
    """Every figure all time (``start`` None), or summed from ``start`` (a whole minute) on:
    minute rows up to the next whole hour, hour rows after it, so a week costs about 170 hour
    rows and 59 minute rows of each figure at most (fold first, for up-to-date figures)."""
    if start is None:
        return Counter({name: value for _, name, value in between(conn, 0, 0, None)})
    first = int(start) // 60 * 60
    hour = -(-first // 3600) * 3600
    found: Counter[str] = Counter()
    for _at, name, value in between(conn, 60, first, hour) + between(conn, 3600, hour, None):
        found[name] += value
    return found


def named(total: Counter[str], prefix: str) -> dict[str, int]:
    """The totals whose names start with ``prefix`` (``BY_TRIGGER``, ``BY_CALLS``, ``BY_COST``),
    by the rest of the name: runs by each trigger, each count of tool calls, each cost."""
    return {k[len(prefix) :]: n for k, n in total.items() if k.startswith(prefix) and n}


def quantile(counts: dict[float, int], q: float) -> float | None:
    """The nearest-rank quantile of the values ``counts`` holds (value: how many)."""
    n = sum(counts.values())
    if not n:
        return None
    rank, seen = min(n, max(1, math.ceil(q * n))), 0
    for value in sorted(counts):
        seen += counts[value]
        if seen >= rank:
            return value
    raise AssertionError("unreachable: rank is at most n")


def _runs_where(conn: Connection, where: ColumnElement[bool]) -> dict[str, RunTally]:
    r = run_tallies.c
    stmt = select(r.run_id, r.actions, r.failed, r.irreversible, r.completed, r.has_read, r.last_at)
    return {
        run_id: RunTally(int(actions), int(failed), int(irreversible), int(done), int(read), at)
        for run_id, actions, failed, irreversible, done, read, at in conn.execute(
            stmt.where(where)
        ).all()
    }


def runs_of(
    conn: Connection, run_ids: Iterable[str], *, every: bool = False
) -> dict[str, RunTally]:
    """The tallies of these runs that have actions (``every``: any, as the fold needs)."""
    found: dict[str, RunTally] = {}
    for among in dialect_of(conn.dialect.name).among(run_tallies.c.run_id, list(run_ids)):
        found |= _runs_where(conn, among if every else among & (run_tallies.c.actions > 0))
    return found


def runs_among(
    conn: Connection, run_ids: Select[Any], since: float | None = None
) -> dict[str, RunTally]:
    """The tallies of the runs a one-column statement selects, in one read (a run with no
    action has none); with ``since``, of those among the runs with an action first attempted
    then or later. The database matches them, however many, with no list of ids sent to it.
    The statement is read once, not once per run of the window: checked per run (an EXISTS),
    SQLite without planner statistics read it through its own index on waiting tickets for
    every run, seconds for a week's window with thousands waiting."""
    selected = run_tallies.c.run_id.in_(run_ids) & (run_tallies.c.actions > 0)
    if since is None:
        return _runs_where(conn, selected)
    return _runs_where(conn, (run_tallies.c.last_at >= since) & selected)


def active_since(run: RunTally, start: float | None) -> bool:
    """Whether the run had an action first attempted at ``start`` or later (any, if None)."""
    return start is None or (run.last_at is not None and run.last_at >= start)


def count_runs_since(conn: Connection, start: float) -> tuple[int, int]:
    """How many runs had an action first attempted at ``start`` or later, and how many of them
    have a failed action: a range of the index on ``last_at``, counted by the database."""
    runs, failed = conn.execute(
        select(func.count(), func.coalesce(func.sum(case((run_tallies.c.failed > 0, 1))), 0)).where(
            run_tallies.c.last_at >= start
        )
    ).one()
    return int(runs), int(failed)


def irreversible_per_run(
    conn: Connection, limit: int, since: float | None = None
) -> dict[str, int]:
    """The ``limit`` runs with the most irreversible executions, most first (ties by run id,
    last first): the top of an index, whatever the number of runs; with ``since``, among the
    runs with an action first attempted then or later."""
    r = run_tallies.c
    stmt = (
        select(r.run_id, r.irreversible)
        .where(r.irreversible > 0, *([] if since is None else [r.last_at >= since]))
        .order_by(r.irreversible.desc(), r.run_id.desc())
        .limit(limit)
    )
    return {run_id: int(n) for run_id, n in conn.execute(stmt)}
