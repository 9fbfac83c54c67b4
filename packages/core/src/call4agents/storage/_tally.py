"""Ledger-wide figures kept up to date as actions change, read at a cost that does not grow with
the ledger.

A trigger on ``c4a_effects`` appends one row to ``c4a_changes`` per insert, delete, or change of
state or attempt: the writer's own transaction carries it, so a crash keeps both or neither, and
an append locks no row that another worker needs. ``fold`` moves those rows into ``c4a_tallies``,
``c4a_run_tallies`` and ``c4a_timeline`` (the same figures by minute and by hour, so a window of
time is read as a few dozen rows) and deletes them, in batches, one fold at a time; whoever reads
the figures folds first. ``recount`` computes the same figures from every action (the migration
seeds the tallies with it; tests compare the two). The same fold moves the run counters' log
into the alerts' run figures (``_run_tally``, schema version 10).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, Connection, Select, case, delete, func, select, text

from . import _fold, _run_tally
from ._fold import BATCH as BATCH  # stat_rows batches by it
from ._fold import qualified as _qualified
from ._fold import upsert as _upsert
from .dialects import dialect_of
from .tables import changes, effects, run_tallies, tallies, timeline

STATES = ("started", "succeeded", "failed", "in_doubt")


@dataclass
class RunTally:
    actions: int = 0
    failed: int = 0
    irreversible: int = 0
    last_at: float | None = None  # when its latest action was first attempted


def create_triggers(conn: Connection) -> None:
    """The triggers that append to ``c4a_changes`` (schema version 7)."""
    if conn.dialect.name == "postgresql":
        _create_pg_triggers(conn)
    else:
        _create_sqlite_triggers(conn)


_COLUMNS = "run_id, kind, old_state, old_attempt, new_state, new_attempt, created_at, at"
# Only a change of state or attempt moves a figure; renewing a lease or pruning does not.
_MOVED_SQLITE = "OLD.state IS NOT NEW.state OR OLD.attempt IS NOT NEW.attempt"
_MOVED_PG = "OLD.state IS DISTINCT FROM NEW.state OR OLD.attempt IS DISTINCT FROM NEW.attempt"
_ROW = {
    "INSERT": "NEW.run_id, NEW.kind, NULL, NULL, NEW.state, NEW.attempt, NEW.created_at, "
    "NEW.updated_at",
    "UPDATE": "NEW.run_id, NEW.kind, OLD.state, OLD.attempt, NEW.state, NEW.attempt, "
    "NEW.created_at, NEW.updated_at",
    # A delete has no time of its own in the row: the database's clock, filled in per dialect.
    "DELETE": "OLD.run_id, OLD.kind, OLD.state, OLD.attempt, NULL, NULL, OLD.created_at, {now}",
}


def drop_triggers(conn: Connection) -> None:
    if conn.dialect.name == "postgresql":
        table = _qualified(conn, "c4a_effects")
        for name in ("c4a_effects_tally", "c4a_effects_tally_update"):
            conn.execute(text(f"DROP TRIGGER IF EXISTS {name} ON {table}"))
        conn.execute(text(f"DROP FUNCTION IF EXISTS {_qualified(conn, 'c4a_effects_tally')}()"))
        return
    for op in _ROW:
        conn.execute(text(f"DROP TRIGGER IF EXISTS c4a_effects_tally_{op.lower()}"))


def _create_sqlite_triggers(conn: Connection) -> None:
    now = dialect_of("sqlite").now_text
    for op, row in _ROW.items():
        when = f"WHEN {_MOVED_SQLITE} " if op == "UPDATE" else ""
        event = "UPDATE OF state, attempt" if op == "UPDATE" else op
        conn.execute(
            text(
                f"CREATE TRIGGER c4a_effects_tally_{op.lower()} AFTER {event} ON c4a_effects "
                f"FOR EACH ROW {when}BEGIN INSERT INTO c4a_changes ({_COLUMNS}) "
                f"VALUES ({row.format(now=now)}); END"
            )
        )


def _create_pg_triggers(conn: Connection) -> None:
    function = _qualified(conn, "c4a_effects_tally")
    table = _qualified(conn, "c4a_effects")
    now = dialect_of("postgresql").now_text
    rows = {op: row.format(now=now) for op, row in _ROW.items()}
    _fold.create_log_function(conn, function, _qualified(conn, "c4a_changes"), _COLUMNS, rows)
    conn.execute(
        text(
            f"CREATE TRIGGER c4a_effects_tally AFTER INSERT OR DELETE ON {table} "
            f"FOR EACH ROW EXECUTE FUNCTION {function}()"
        )
    )
    conn.execute(
        text(
            f"CREATE TRIGGER c4a_effects_tally_update AFTER UPDATE OF state, attempt ON {table} "
            f"FOR EACH ROW WHEN ({_MOVED_PG}) EXECUTE FUNCTION {function}()"
        )
    )


# -- folding -----------------------------------------------------------------------------------


def _contribution(state: str | None, attempt: int | None, kind: str) -> Counter[str]:
    """What one action in ``state`` at ``attempt`` adds to the ledger-wide figures."""
    found: Counter[str] = Counter()
    if state is None or attempt is None:
        return found
    found["actions:" + state] = 1
    found["retried"] = int(attempt > 1)
    found["executions"] = attempt
    if kind == "irreversible":
        found["irreversible"] = attempt
    return found


def _lock(conn: Connection) -> None:
    """One fold at a time (SQLite: the write transaction already is)."""
    if conn.dialect.name == "postgresql":
        # Conflicts with itself, not with plain reads of the tallies.
        conn.execute(text(f"LOCK TABLE {_qualified(conn, 'c4a_tallies')} IN EXCLUSIVE MODE"))


def fold_batch(conn: Connection, limit: int = BATCH) -> int:
    """Fold up to ``limit`` changes into the tallies, inside the caller's write transaction;
    returns how many were folded. Deleting and reading them is one statement, so a change
    committed meanwhile is either in this batch or left for the next, never lost or doubled."""
    _lock(conn)
    oldest = select(changes.c.id).order_by(changes.c.id).limit(limit)
    rows = conn.execute(
        delete(changes)
        .where(changes.c.id.in_(oldest))
        .returning(
            changes.c.run_id,
            changes.c.kind,
            changes.c.old_state,
            changes.c.old_attempt,
            changes.c.new_state,
            changes.c.new_attempt,
            changes.c.created_at,
            changes.c.at,
        )
    ).all()
    if rows:
        _apply(conn, rows)
    # The run counters' log, under the same lock. A full batch of either means there may be more.
    return max(len(rows), _run_tally.fold_batch(conn, limit))


def _apply(conn: Connection, rows: Sequence[Any]) -> None:
    total: Counter[str] = Counter()
    per_run: dict[str, RunTally] = {}
    for run_id, kind, old_state, old_attempt, new_state, new_attempt, created_at, _at in rows:
        total.update(_contribution(new_state, new_attempt, kind))
        total.subtract(_contribution(old_state, old_attempt, kind))
        delta = per_run.setdefault(run_id, RunTally())
        delta.actions += (new_state is not None) - (old_state is not None)
        delta.failed += (new_state == "failed") - (old_state == "failed")
        if kind == "irreversible":
            delta.irreversible += (new_attempt or 0) - (old_attempt or 0)
        if new_state is not None and created_at is not None:
            delta.last_at = _later(delta.last_at, float(created_at))
    before = _read_runs(conn, per_run)
    upserts: list[dict[str, Any]] = []
    gone: list[str] = []
    for run_id, delta in per_run.items():
        old = before.get(run_id, RunTally())
        new = RunTally(
            old.actions + delta.actions,
            old.failed + delta.failed,
            old.irreversible + delta.irreversible,
            _later(old.last_at, delta.last_at),
        )
        total["runs"] += (new.actions > 0) - (old.actions > 0)
        total["runs_failed"] += (new.failed > 0) - (old.failed > 0)
        if new.actions > 0:
            upserts.append({"run_id": run_id, **new.__dict__})
        elif run_id in before:
            gone.append(run_id)
    for among in dialect_of(conn.dialect.name).among(run_tallies.c.run_id, gone):
        conn.execute(delete(run_tallies).where(among))
    if upserts:
        _upsert(conn, run_tallies, upserts, ["run_id"], replace=True)
    moved = [{"name": k, "value": v} for k, v in total.items() if v]
    if moved:
        _upsert(conn, tallies, moved, ["name"], replace=False)
    _add_to_timeline(conn, _timeline_moves(rows))


def _later(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else max(a, b)


def _read_runs(conn: Connection, runs: Iterable[str]) -> dict[str, RunTally]:
    found: dict[str, RunTally] = {}
    for among in dialect_of(conn.dialect.name).among(run_tallies.c.run_id, list(runs)):
        for run_id, actions, failed, irreversible, last_at in conn.execute(
            select(run_tallies).where(among)
        ).all():
            found[run_id] = RunTally(int(actions), int(failed), int(irreversible), last_at)
    return found


# -- the timeline: the tallies split by minute and by hour ---------------------------------------

STEPS = (60, 3600)
# Filed under the time the action fell in doubt or left it, not when it was first attempted.
DOUBT_IN, DOUBT_OUT = "doubt_in", "doubt_out"
Filed = tuple[int, int, str]  # step, start of the minute or hour, name


def _file(found: Counter[Filed], at: float, moved: Counter[str]) -> None:
    for name, n in moved.items():
        if n:
            for step in STEPS:
                found[(step, int(at // step) * step, name)] += n


def _timeline_moves(rows: Sequence[Any]) -> Counter[Filed]:
    found: Counter[Filed] = Counter()
    for _run, kind, old_state, old_attempt, new_state, new_attempt, created_at, at in rows:
        if created_at is not None:  # a change logged before schema version 9 has no times
            moved = _contribution(new_state, new_attempt, kind)
            moved.subtract(_contribution(old_state, old_attempt, kind))
            _file(found, float(created_at), moved)
        if at is not None and (old_state == "in_doubt") != (new_state == "in_doubt"):
            _file(
                found, float(at), Counter({DOUBT_IN if new_state == "in_doubt" else DOUBT_OUT: 1})
            )
    return found


def _add_to_timeline(conn: Connection, moves: Counter[Filed]) -> None:
    rows = [
        {"step": step, "at": at, "name": name, "value": n}
        for (step, at, name), n in moves.items()
        if n
    ]
    if rows:
        _upsert(conn, timeline, rows, ["step", "at", "name"], replace=False)


def timeline_between(conn: Connection, step: int, start: int, end: int | None) -> list[Any]:
    """The timeline's rows of one step filed at ``start`` or later (and before ``end``): start of
    the minute or hour, name, value; a range of the primary key."""
    stmt = select(timeline.c.at, timeline.c.name, timeline.c.value).where(
        timeline.c.step == step,
        timeline.c.at >= start,
        *([] if end is None else [timeline.c.at < end]),
    )
    return [(int(at), str(name), int(value)) for at, name, value in conn.execute(stmt).all()]


def count_runs_since(conn: Connection, start: float) -> tuple[int, int]:
    """How many runs had an action first attempted at ``start`` or later, and how many of them
    have a failed action: a range of the index on ``last_at``, counted by the database."""
    runs, failed = conn.execute(
        select(func.count(), func.coalesce(func.sum(case((run_tallies.c.failed > 0, 1))), 0)).where(
            run_tallies.c.last_at >= start
        )
    ).one()
    return int(runs), int(failed)


def active_since(run: RunTally, start: float | None) -> bool:
    """Whether the run had an action first attempted at ``start`` or later (any, if None)."""
    return start is None or (run.last_at is not None and run.last_at >= start)


def runs_among(
    conn: Connection, run_ids: Select[Any], since: float | None = None
) -> dict[str, RunTally]:
    """The tallies of the runs a one-column statement selects, in one read (a run with no
    action has none); with ``since``, of those among the runs with an action first attempted
    then or later. The database matches them, however many, with no list of ids sent to it.
    The statement is read once, not once per run of the window: checked per run (an EXISTS),
    SQLite without planner statistics read it through its own index on waiting tickets for
    every run, seconds for a week's window with thousands waiting."""
    selected = run_tallies.c.run_id.in_(run_ids)
    if since is None:
        return _tallies_where(conn, selected)
    return _tallies_where(conn, (run_tallies.c.last_at >= since) & selected)


def _tallies_where(conn: Connection, where: ColumnElement[bool]) -> dict[str, RunTally]:
    return {
        run_id: RunTally(int(actions), int(failed), int(irreversible), last_at)
        for run_id, actions, failed, irreversible, last_at in conn.execute(
            select(run_tallies).where(where)
        ).all()
    }


# -- reading -----------------------------------------------------------------------------------


# The action figures among the tallies; the rest are the run figures (``_run_tally``).
NAMES = (
    *("actions:" + s for s in STATES),
    "retried",
    "executions",
    "irreversible",
    "runs",
    "runs_failed",
)


def read(conn: Connection) -> dict[str, int]:
    """The ledger-wide action tallies (fold first for up-to-date figures), by key; a missing
    name is 0."""
    stmt = select(tallies).where(tallies.c.name.in_(NAMES))
    return {name: int(value) for name, value in conn.execute(stmt)}


def irreversible_per_run(
    conn: Connection, limit: int, since: float | None = None
) -> dict[str, int]:
    """The ``limit`` runs with the most irreversible executions, most first (ties by run id,
    last first): the top of an index, whatever the number of runs; with ``since``, among the
    runs with an action first attempted then or later."""
    stmt = (
        select(run_tallies.c.run_id, run_tallies.c.irreversible)
        .where(
            run_tallies.c.irreversible > 0,
            *([] if since is None else [run_tallies.c.last_at >= since]),
        )
        .order_by(run_tallies.c.irreversible.desc(), run_tallies.c.run_id.desc())
        .limit(limit)
    )
    return {run_id: int(n) for run_id, n in conn.execute(stmt)}


def runs_of(conn: Connection, run_ids: Iterable[str]) -> dict[str, RunTally]:
    """The tallies of these runs (a run with no action has none)."""
    return _read_runs(conn, run_ids)


# -- recounting --------------------------------------------------------------------------------


@dataclass
class Recount:
    """Every figure the fold keeps, computed from the actions themselves."""

    total: dict[str, int]
    per_run: dict[str, RunTally]
    # By the time each action was first attempted; an action now in doubt counts as having
    # fallen in doubt at its last change (the ledger keeps no older history of doubt).
    timeline: Counter[Filed]


def recount(conn: Connection) -> Recount:
    """The tallies computed from every action: reads the whole table."""
    total: Counter[str] = Counter()
    per_run: dict[str, RunTally] = {}
    filed: Counter[Filed] = Counter()
    stmt = select(
        effects.c.run_id,
        effects.c.kind,
        effects.c.state,
        effects.c.attempt,
        effects.c.created_at,
        effects.c.updated_at,
    )
    for run_id, kind, state, attempt, created_at, updated_at in conn.execute(stmt):
        moved = _contribution(state, attempt, kind)
        total.update(moved)
        _file(filed, float(created_at), moved)
        if state == "in_doubt":
            _file(filed, float(updated_at), Counter({DOUBT_IN: 1}))
        run = per_run.setdefault(run_id, RunTally())
        run.actions += 1
        run.failed += state == "failed"
        if kind == "irreversible":
            run.irreversible += attempt
        run.last_at = _later(run.last_at, float(created_at))
    total["runs"] = len(per_run)
    total["runs_failed"] = sum(r.failed > 0 for r in per_run.values())
    return Recount({k: v for k, v in total.items() if v}, per_run, +filed)


def seed(conn: Connection, *, with_timeline: bool = True) -> None:
    """Fill empty tallies (and the timeline, unless told not to) from a recount: a ledger made
    before schema version 9."""
    found = recount(conn)
    rows = [{"run_id": run_id, **run.__dict__} for run_id, run in found.per_run.items()]
    for start in range(0, len(rows), BATCH):
        conn.execute(run_tallies.insert(), rows[start : start + BATCH])
    if found.total:
        conn.execute(tallies.insert(), [{"name": k, "value": v} for k, v in found.total.items()])
    if with_timeline:
        _add_to_timeline(conn, found.timeline)


def count_changes(conn: Connection) -> int:
    return int(conn.execute(select(func.count()).select_from(changes)).scalar_one())
