"""The alerts' run figures kept up to date as run counters change (schema version 10), read at a
cost that does not grow with the number of runs.

The figures: runs completed, and how many of them read something; runs by each trigger they were
entered with; runs by tool calls and by cost (each cost to two significant figures), from which
the quantiles are read by nearest rank. As ``_tally`` does for actions, a trigger on
``c4a_run_counters`` appends each change of a counter these figures read to
``c4a_run_changes`` (in the writer's transaction); ``fold_batch`` (called by ``_tally``'s, under
the same lock) moves them into ``c4a_tallies`` and ``c4a_run_marks`` and deletes them.
``recount`` computes the same from every counter; ``seed`` fills them when a ledger is migrated.

Every move is a sum of differences (a counter's new value counted, its old one taken away), so
changes folded in any order, as PostgreSQL may commit them, add up to the same figures.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, Connection, delete, func, or_, select, text

from . import _fold
from ._fold import BATCH, upsert
from ._fold import qualified as _qualified
from .dialects import dialect_of
from .run_rows import COMPLETED_AT, READS, TOOL_CALLS, TRIGGER
from .tables import run_changes, run_counters, run_marks, tallies

COST = "cost"  # a budget's counter: what the run spent
COMPLETED, WITH_READ = "runs_completed", "runs_completed_with_read"
BY_TRIGGER, BY_CALLS, BY_COST = "runs_trigger:", "tool_calls:", "cost:"
# Counters whose every value moves a figure; a trigger's or a completion's value is a time, and
# only its insert or delete does.
_VALUED = (READS, TOOL_CALLS, COST)


@dataclass
class RunMark:
    completed: int = 0  # the run's completion counter: 0 or 1
    has_read: int = 0  # its reads counter is above 0: 0 or 1


@dataclass(frozen=True)
class RunFigures:
    """The tallies read back: counts, and the runs by each value of tool calls and of cost."""

    completed: int
    with_read: int
    triggers: dict[str, int]
    tool_calls: dict[float, int]
    costs: dict[float, int]


def two_figures(value: float) -> float:
    """``value`` to two significant figures, as the cost histogram files it."""
    return float(f"{value:.2g}") + 0.0  # + 0.0: -0.0 files as 0


def _number(value: float) -> str:
    # Exact for any count of tool calls and any two-figure cost; "12", not "12.0".
    return format(value, ".15g")


# -- the trigger -------------------------------------------------------------------------------

_COLUMNS = "run_id, name, old_value, new_value"
_ROW = {
    "INSERT": "NEW.run_id, NEW.name, NULL, NEW.value",
    "UPDATE": "NEW.run_id, NEW.name, OLD.value, NEW.value",
    "DELETE": "OLD.run_id, OLD.name, OLD.value, NULL",
}


def _watched(row: str) -> str:
    """The counters the figures read (substr, not LIKE: exact and case-sensitive on both)."""
    names = ", ".join(f"'{n}'" for n in (COMPLETED_AT, *_VALUED))
    return f"({row}.name IN ({names}) OR substr({row}.name, 1, {len(TRIGGER)}) = '{TRIGGER}')"


def _moved() -> str:
    """An update that moves a figure: reads crossing 0, tool calls or cost changing."""
    return (
        f"((NEW.name = '{READS}' AND (OLD.value > 0) <> (NEW.value > 0)) OR "
        f"(NEW.name IN ('{TOOL_CALLS}', '{COST}') AND OLD.value <> NEW.value))"
    )


_WHEN = {"INSERT": _watched("NEW"), "UPDATE": _moved(), "DELETE": _watched("OLD")}


def create_triggers(conn: Connection) -> None:
    """The triggers that append to ``c4a_run_changes`` (schema version 10)."""
    if conn.dialect.name == "postgresql":
        _create_pg_triggers(conn)
        return
    for op, row in _ROW.items():
        event = "UPDATE OF value" if op == "UPDATE" else op
        conn.execute(
            text(
                f"CREATE TRIGGER c4a_run_counters_tally_{op.lower()} AFTER {event} ON "
                f"c4a_run_counters FOR EACH ROW WHEN {_WHEN[op]} BEGIN INSERT INTO "
                f"c4a_run_changes ({_COLUMNS}) VALUES ({row}); END"
            )
        )


def _create_pg_triggers(conn: Connection) -> None:
    function = _qualified(conn, "c4a_run_counters_tally")
    table = _qualified(conn, "c4a_run_counters")
    _fold.create_log_function(conn, function, _qualified(conn, "c4a_run_changes"), _COLUMNS, _ROW)
    # One trigger per operation: each tests its row in WHEN, so a counter the figures do not
    # read (most of a budget's) never calls the function.
    for op in _ROW:
        event = "UPDATE OF value" if op == "UPDATE" else op
        conn.execute(
            text(
                f"CREATE TRIGGER c4a_run_counters_tally_{op.lower()} AFTER {event} ON {table} "
                f"FOR EACH ROW WHEN {_WHEN[op]} EXECUTE FUNCTION {function}()"
            )
        )


def drop_triggers(conn: Connection) -> None:
    if conn.dialect.name == "postgresql":
        table = _qualified(conn, "c4a_run_counters")
        for op in _ROW:
            name = f"c4a_run_counters_tally_{op.lower()}"
            conn.execute(text(f"DROP TRIGGER IF EXISTS {name} ON {table}"))
        conn.execute(
            text(f"DROP FUNCTION IF EXISTS {_qualified(conn, 'c4a_run_counters_tally')}()")
        )
        return
    for op in _ROW:
        conn.execute(text(f"DROP TRIGGER IF EXISTS c4a_run_counters_tally_{op.lower()}"))


# -- folding -----------------------------------------------------------------------------------


def fold_batch(conn: Connection, limit: int) -> int:
    """Fold up to ``limit`` logged counter changes, in the caller's transaction (which holds
    ``_tally``'s fold lock); returns how many. Read and deleted in one statement, as ``_tally``
    does, so a change committed meanwhile is in this batch or the next."""
    oldest = select(run_changes.c.id).order_by(run_changes.c.id).limit(limit)
    rows = conn.execute(
        delete(run_changes)
        .where(run_changes.c.id.in_(oldest))
        .returning(
            run_changes.c.run_id,
            run_changes.c.name,
            run_changes.c.old_value,
            run_changes.c.new_value,
        )
    ).all()
    if rows:
        _apply(conn, rows)
    return len(rows)


def _contribution(name: str, value: float | None) -> Counter[str]:
    """What one counter at ``value`` (None: absent) adds to the ledger-wide figures, but for the
    marks' figures, which need two counters of the run at once."""
    found: Counter[str] = Counter()
    if value is None:
        return found
    if name == TOOL_CALLS:
        found[BY_CALLS + _number(value)] = 1
    elif name == COST:
        found[BY_COST + _number(two_figures(value))] = 1
    elif name.startswith(TRIGGER):
        found[BY_TRIGGER + name[len(TRIGGER) :]] = 1
    return found


def _mark_of(name: str, value: float | None) -> RunMark:
    """What one counter at ``value`` adds to its run's mark."""
    present = value is not None
    return RunMark(
        completed=int(present and name == COMPLETED_AT),
        has_read=int(present and name == READS and value is not None and value > 0),
    )


def _counted(mark: RunMark) -> Counter[str]:
    """What a run's mark adds to the ledger-wide figures."""
    done = mark.completed > 0
    return Counter({COMPLETED: int(done), WITH_READ: int(done and mark.has_read > 0)})


def _apply(conn: Connection, rows: Sequence[Any]) -> None:
    total: Counter[str] = Counter()
    moved: dict[str, RunMark] = {}
    for run_id, name, old, new in rows:
        total.update(_contribution(name, new))
        total.subtract(_contribution(name, old))
        if name in (COMPLETED_AT, READS):
            gained, lost = _mark_of(name, new), _mark_of(name, old)
            delta = moved.setdefault(run_id, RunMark())
            delta.completed += gained.completed - lost.completed
            delta.has_read += gained.has_read - lost.has_read
    before = _read_marks(conn, moved)
    upserts: list[dict[str, Any]] = []
    gone: list[str] = []
    for run_id, delta in moved.items():
        old_mark = before.get(run_id, RunMark())
        new_mark = RunMark(old_mark.completed + delta.completed, old_mark.has_read + delta.has_read)
        total.update(_counted(new_mark))
        total.subtract(_counted(old_mark))
        if new_mark.completed or new_mark.has_read:
            upserts.append({"run_id": run_id, **new_mark.__dict__})
        elif run_id in before:
            gone.append(run_id)
    for among in dialect_of(conn.dialect.name).among(run_marks.c.run_id, gone):
        conn.execute(delete(run_marks).where(among))
    if upserts:
        upsert(conn, run_marks, upserts, ["run_id"], replace=True)
    changed = [{"name": k, "value": v} for k, v in total.items() if v]
    if changed:
        upsert(conn, tallies, changed, ["name"], replace=False)


def _read_marks(conn: Connection, run_ids: Iterable[str]) -> dict[str, RunMark]:
    found: dict[str, RunMark] = {}
    for among in dialect_of(conn.dialect.name).among(run_marks.c.run_id, list(run_ids)):
        for run_id, completed, has_read in conn.execute(select(run_marks).where(among)).all():
            found[run_id] = RunMark(int(completed), int(has_read))
    return found


# -- reading -----------------------------------------------------------------------------------


def _named(conn: Connection, prefix: str) -> dict[str, int]:
    """The tallies whose names start with ``prefix``: a range of the primary key."""
    stmt = select(tallies.c.name, tallies.c.value).where(_fold.prefixed(tallies.c.name, prefix))
    return {str(name)[len(prefix) :]: int(n) for name, n in conn.execute(stmt) if n > 0}


def is_run_figure(name: ColumnElement[str]) -> ColumnElement[bool]:
    """The tallies' names that are run figures (the rest are the actions' figures)."""
    return or_(
        name.in_((COMPLETED, WITH_READ)),
        *(_fold.prefixed(name, prefix) for prefix in (BY_TRIGGER, BY_CALLS, BY_COST)),
    )


def read(conn: Connection) -> RunFigures:
    """The run figures from the tallies (fold first for up-to-date figures): two keys and three
    ranges of the primary key, as many rows as there are triggers, tool-call counts and two-figure
    costs, whatever the number of runs."""
    keyed = select(tallies.c.name, tallies.c.value).where(
        tallies.c.name.in_((COMPLETED, WITH_READ))
    )
    counts = {str(name): int(n) for name, n in conn.execute(keyed)}
    return RunFigures(
        completed=counts.get(COMPLETED, 0),
        with_read=counts.get(WITH_READ, 0),
        triggers=_named(conn, BY_TRIGGER),
        tool_calls={float(k): n for k, n in _named(conn, BY_CALLS).items()},
        costs={float(k): n for k, n in _named(conn, BY_COST).items()},
    )


def quantile(counts: dict[float, int], q: float) -> float | None:
    """The nearest-rank quantile of the values ``counts`` holds (value: how many runs)."""
    n = sum(counts.values())
    if not n:
        return None
    rank = min(n, max(1, math.ceil(q * n)))
    seen = 0
    for value in sorted(counts):
        seen += counts[value]
        if seen >= rank:
            return value
    raise AssertionError("unreachable: rank is at most n")


# -- recounting --------------------------------------------------------------------------------


@dataclass
class Recount:
    """The run figures computed from every counter: the tallies (no zeros) and the marks."""

    total: dict[str, int]
    marks: dict[str, RunMark]


def recount(conn: Connection) -> Recount:
    """The run figures from every counter they read: ranges of the counters' value index."""
    watched = or_(
        run_counters.c.name.in_((COMPLETED_AT, *_VALUED)),
        _fold.prefixed(run_counters.c.name, TRIGGER),
    )
    stmt = select(run_counters.c.run_id, run_counters.c.name, run_counters.c.value).where(watched)
    total: Counter[str] = Counter()
    marks: dict[str, RunMark] = {}
    for run_id, name, value in conn.execute(stmt):
        total.update(_contribution(name, float(value)))
        if name in (COMPLETED_AT, READS):
            mark = _mark_of(name, float(value))
            found = marks.setdefault(run_id, RunMark())
            found.completed += mark.completed
            found.has_read += mark.has_read
    marks = {r: m for r, m in marks.items() if m.completed or m.has_read}
    for mark in marks.values():
        total.update(_counted(mark))
    return Recount(+total, marks)


def seed(conn: Connection) -> None:
    """Fill the marks and add the run figures to the tallies from a recount (a ledger made
    before schema version 10, or one loaded in bulk with the triggers off)."""
    found = recount(conn)
    rows = [{"run_id": run_id, **mark.__dict__} for run_id, mark in found.marks.items()]
    for start in range(0, len(rows), BATCH):
        conn.execute(run_marks.insert(), rows[start : start + BATCH])
    if found.total:
        upsert(
            conn,
            tallies,
            [{"name": k, "value": v} for k, v in found.total.items()],
            ["name"],
            replace=False,
        )


def count_changes(conn: Connection) -> int:
    return int(conn.execute(select(func.count()).select_from(run_changes)).scalar_one())
