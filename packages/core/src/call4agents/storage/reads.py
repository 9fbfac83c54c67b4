"""Reading recorded actions back, and forgetting them: the statements behind ``Ledger``'s lists,
its lease sweep, ``delete_run`` and ``gc``.

Every query here is served by an index at any size (``tests/core/test_query_plans.py``). Rows
are returned as mappings of ``c4a_effects``' columns; the engine turns them into records.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, and_, delete, func, or_, select, tuple_, update
from sqlalchemy.engine import Connection, RowMapping

from .dialects import dialect_of
from .store import Store
from .tables import approvals, effects, in_doubt_only, in_open_state, meta
from .tables import runs as runs_table

Forget = Callable[..., None]  # a run's own notes: run_rows.forget(conn, run_id=..., before=...)


def key_salt(store: Store) -> str | None:
    """The salt that hides redacted values inside action keys (schema version 2 on)."""
    with store.read() as conn:
        found: str | None = conn.execute(
            select(meta.c.value).where(meta.c.name == "key_salt")
        ).scalar()
        return found


def recorded_results(store: Store, run_id: str, *, rows: int, max_bytes: int) -> list[Any]:
    """A run's succeeded results, up to ``rows`` of them, each at most ``max_bytes``."""
    stmt = (
        select(effects.c.key, effects.c.result)
        .where(
            effects.c.run_id == run_id,
            effects.c.state == "succeeded",
            effects.c.pruned_at.is_(None),
            func.length(effects.c.result) <= max_bytes,
        )
        .order_by(effects.c.seq)
        .limit(rows)
    )
    with store.read() as conn:
        return list(conn.execute(stmt).all())


def actions(store: Store, run_id: str | None, limit: int | None) -> list[RowMapping]:
    stmt = select(effects).order_by(effects.c.seq)
    if run_id is not None:
        stmt = stmt.where(effects.c.run_id == run_id)
    if limit is not None:
        stmt = stmt.limit(limit)
    with store.read() as conn:
        return list(conn.execute(stmt).mappings())


def action(store: Store, key: str) -> RowMapping | None:
    with store.read() as conn:
        return conn.execute(select(effects).where(effects.c.key == key)).mappings().first()


def actions_by_prefix(store: Store, prefix: str, limit: int) -> list[RowMapping]:
    with store.read() as conn:
        found = conn.execute(
            select(effects).where(effects.c.key.startswith(prefix, autoescape=True)).limit(limit)
        )
        return list(found.mappings())


def in_doubt(store: Store) -> list[RowMapping]:
    with store.read() as conn:
        rows = conn.execute(
            select(effects).where(in_open_state("in_doubt")).order_by(effects.c.seq)
        )
        return list(rows.mappings())


@dataclass(frozen=True)
class DoubtFilter:
    """Which actions in doubt a person wants to see. ``run_id`` and ``reason`` match anywhere
    in the value (``reason``: why it is in doubt, its note or its error); ``older_than``: in doubt
    for at least that many seconds, by the database clock."""

    tool: str | None = None
    run_id: str | None = None
    reason: str | None = None
    older_than: float | None = None


def _doubt_conds(store: Store, f: DoubtFilter) -> list[ColumnElement[bool]]:
    c = effects.c
    conds: list[ColumnElement[bool]] = [in_doubt_only()]
    if f.tool:
        conds.append(c.tool == f.tool)
    if f.run_id:
        conds.append(c.run_id.contains(f.run_id, autoescape=True))
    if f.reason:
        conds.append(or_(*(col.contains(f.reason, autoescape=True) for col in (c.note, c.error))))
    if f.older_than is not None:
        conds.append(c.updated_at <= dialect_of(store.dialect).now() - f.older_than)
    return conds


def in_doubt_page(
    store: Store, f: DoubtFilter, *, after: str | None, limit: int
) -> list[RowMapping]:
    """One page of the actions in doubt that ``f`` selects, the longest in doubt first, starting
    after the action whose key is ``after`` (keyset paging by the time it went into doubt, then
    ``seq`` for ties: a range of ``c4a_effects_doubt`` however deep the page). An ``after`` that
    is no action gives []."""
    conds = _doubt_conds(store, f)
    at, seq = effects.c.updated_at, effects.c.seq
    with store.read() as conn:
        if after is not None:
            mark = conn.execute(select(at, seq).where(effects.c.key == after)).first()
            if mark is None:
                return []
            conds.append(or_(at > mark[0], and_(at == mark[0], seq > mark[1])))
        stmt = select(effects).where(*conds).order_by(at, seq).limit(limit)
        return list(conn.execute(stmt).mappings())


def in_doubt_total(store: Store, f: DoubtFilter) -> int:
    with store.read() as conn:
        return int(conn.execute(select(func.count()).where(*_doubt_conds(store, f))).scalar_one())


def started(store: Store) -> list[Any]:
    """Every started action: key, attempt, owner, and whether its lease lapsed by the database
    clock (the sweep judges each by its owner, then by the lapse)."""
    now = dialect_of(store.dialect).now()
    with store.read() as conn:
        return list(
            conn.execute(
                select(
                    effects.c.key,
                    effects.c.attempt,
                    effects.c.owner,
                    (effects.c.lease_expires_at <= now).label("lapsed"),
                ).where(in_open_state("started"))
            ).all()
        )


_RUN_SCAN = 2000  # actions read per step while looking for the most recent runs


def latest_runs(
    store: Store,
    *,
    limit: int,
    tool: str | None,
    search: str | None,
    cutoff: float | None,
    before: tuple[float, str] | None = None,
) -> list[Any]:
    """The most recently active runs with their counts: run id, actions, succeeded, failed, in
    doubt, started, first created, last updated; newest first (then by run id, descending).
    ``before``: the last active time and id of the last run of the page before, for the next."""
    conds: list[ColumnElement[bool]] = []
    if tool is not None:
        conds.append(effects.c.tool == tool)
    if search:
        conds.append(effects.c.run_id.contains(search, autoescape=True))
    with store.read() as conn:
        ids = _latest_run_ids(conn, conds, limit, cutoff, before)
        return list(conn.execute(_run_counts(ids)).all()) if ids else []


def _latest_run_ids(
    conn: Connection,
    conds: Sequence[ColumnElement[bool]],
    limit: int,
    cutoff: float | None,
    before: tuple[float, str] | None,
) -> list[str]:
    """The ``limit`` runs updated most recently (and not before ``cutoff``), read newest action
    first through the index on updated_at: a run's first action met is its latest, so the scan
    stops once enough are found instead of grouping every action of the ledger. Each step goes
    on from the last row read (its time, then its ``seq`` for ties), not by an offset the
    database would have to count through again. After ``before`` the scan starts at that time,
    and a run met there that was active later belongs to an earlier page: it is skipped."""
    found: dict[str, None] = {}
    after: ColumnElement[bool] | None = None
    if before is not None:
        after = effects.c.updated_at <= before[0]
    while len(found) < limit:
        rows = conn.execute(
            select(effects.c.run_id, effects.c.updated_at, effects.c.seq)
            .where(*conds, *([] if after is None else [after]))
            # The index alone (its entries carry the row's seq): no sort of the rest.
            .order_by(effects.c.updated_at.desc(), effects.c.seq.desc())
            .limit(_RUN_SCAN)
        ).all()
        met = [r for r in rows if cutoff is None or r.updated_at >= cutoff]
        fresh = list(dict.fromkeys(r.run_id for r in met if r.run_id not in found))
        while fresh and len(found) < limit:
            # No more candidates checked at once than the page still needs: each check reads
            # every action of its runs.
            step, fresh = fresh[: limit - len(found)], fresh[limit - len(found) :]
            for run_id in step if before is None else _active_before(conn, step, before):
                found.setdefault(run_id, None)
        if len(met) < len(rows) or len(rows) < _RUN_SCAN:
            break
        _run, last_at, last_seq = rows[-1]
        # The range on updated_at is what the index serves; the tie-break filters the few
        # rows that share the last time.
        after = and_(
            effects.c.updated_at <= last_at,
            or_(effects.c.updated_at < last_at, effects.c.seq < last_seq),
        )
    return list(found)


def _active_before(conn: Connection, run_ids: list[str], before: tuple[float, str]) -> list[str]:
    """Those of ``run_ids`` (in their order) whose latest action comes after ``before`` in the
    list's order: earlier in time, or at the same time with a smaller run id."""
    if not run_ids:
        return []
    at, run = before
    last = dict(
        conn.execute(
            select(effects.c.run_id, func.max(effects.c.updated_at))
            .where(effects.c.run_id.in_(run_ids))
            .group_by(effects.c.run_id)
        ).all()
    )
    return [r for r in run_ids if last[r] < at or (last[r] == at and r < run)]


def _run_counts(run_ids: list[str]) -> Any:
    def count(state: str) -> Any:
        return func.sum(func.cast(effects.c.state == state, effects.c.attempt.type))

    return (
        select(
            effects.c.run_id,
            func.count(),
            count("succeeded"),
            count("failed"),
            count("in_doubt"),
            count("started"),
            func.min(effects.c.created_at),
            func.max(effects.c.updated_at),
        )
        .where(effects.c.run_id.in_(run_ids))
        .group_by(effects.c.run_id)
        .order_by(func.max(effects.c.updated_at).desc(), effects.c.run_id.desc())
    )


# -- forgetting -----------------------------------------------------------------------------------


def delete_run(store: Store, run_id: str, forget: Forget) -> tuple[int, int]:
    """Delete a run's records in one transaction unless an action is open: (open, deleted)."""
    with store.tx() as conn:
        open_ = conn.execute(
            select(func.count()).where(
                effects.c.run_id == run_id, effects.c.state.in_(("started", "in_doubt"))
            )
        ).scalar_one()
        if open_:
            return int(open_), 0
        conn.execute(delete(approvals).where(approvals.c.run_id == run_id))
        conn.execute(delete(runs_table).where(runs_table.c.run_id == run_id))
        forget(conn, run_id=run_id)
        return 0, int(conn.execute(delete(effects).where(effects.c.run_id == run_id)).rowcount)


def gc(store: Store, cutoff: float, batch: int, forget: Forget) -> tuple[int, int, int]:
    """Prune succeeded actions (a tombstone stays), delete failed ones, last touched before
    ``cutoff``; drop run notes as old. (pruned, deleted, open ones kept)."""
    pruned = _gc_batches(
        store,
        and_(effects.c.state == "succeeded", effects.c.pruned_at.is_(None)),
        cutoff,
        batch,
        prune=True,
    )
    deleted = _gc_batches(store, effects.c.state == "failed", cutoff, batch, prune=False)
    with store.tx() as conn:
        forget(conn, before=cutoff)  # the run summaries of runs that old
    with store.read() as conn:
        kept = conn.execute(
            select(func.count()).where(
                effects.c.state.in_(("started", "in_doubt")), effects.c.updated_at < cutoff
            )
        ).scalar_one()
    return pruned, deleted, int(kept)


def _gc_batches(
    store: Store, cond: ColumnElement[bool], cutoff: float, batch: int, *, prune: bool
) -> int:
    total, after = 0, None
    order = (effects.c.updated_at, effects.c.seq)
    while True:
        with store.tx() as conn:
            query = select(*order).where(cond, effects.c.updated_at < cutoff)
            if after is not None:
                # Each batch starts where the last one ended: pruning leaves the tombstones'
                # updated_at alone, and rescanning them from the start would make a large gc
                # quadratic.
                query = query.where(tuple_(*order) > tuple_(*after))
            found = conn.execute(query.order_by(*order).limit(batch)).all()
            if not found:
                return total
            after = tuple(found[-1])
            keys = [seq for _, seq in found]
            # Re-check state and age in the write itself: on PostgreSQL the SELECT above takes
            # no lock, and a worker may have taken a failed action up again meanwhile.
            target = and_(effects.c.seq.in_(keys), cond, effects.c.updated_at < cutoff)
            if prune:
                done = conn.execute(
                    update(effects)
                    .where(target)
                    .values(
                        args="{}",
                        args_digest=None,  # a digest would let guesses be tested
                        result=None,
                        evidence=None,
                        pruned_at=dialect_of(store.dialect).now(),
                    )
                )
            else:
                done = conn.execute(delete(effects).where(target))
        total += done.rowcount
