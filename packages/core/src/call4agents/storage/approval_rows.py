"""The statements of approvals: signed tickets in ``c4a_approvals``, read and written.

The engine signs and verifies every ticket (``engine/approvals.py``); these functions only move
rows. Those named for a transaction take the caller's (``Conn``): a yes is spent in the same
transaction as the intent it allows, so a crash can neither burn a yes without the intent nor
leave the intent without its yes spent.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, and_, func, or_, select, update

from .dialects import dialect_of
from .store import Conn, Store
from .tables import approvals, effects

Ticket = dict[str, Any]  # a row of c4a_approvals (and "now", the database clock, where read so)


def hold(conn: Conn, name: str) -> None:
    """Hold a lock on ``name`` until the transaction ends. Closes: two workers asking about one
    action at once each opening a ticket (a person asked twice), or both passing a per-run
    limit. SQLite has one writer at a time already."""
    lock_id = int(hashlib.sha256(name.encode()).hexdigest()[:15], 16)
    dialect_of(conn.dialect.name).hold(conn, lock_id)


def calls_in_run(conn: Conn, run_id: str, tool: str) -> int:
    """Actions of ``tool`` in the run that ran or may have (failed ones did not act)."""
    found = conn.execute(
        select(func.count()).where(
            effects.c.run_id == run_id, effects.c.tool == tool, effects.c.state != "failed"
        )
    ).scalar_one()
    return int(found)


def action_state(conn: Conn, key: str) -> tuple[str, int] | None:
    """The action's state and attempt, if it was ever claimed."""
    found = conn.execute(
        select(effects.c.state, effects.c.attempt).where(effects.c.key == key)
    ).first()
    return None if found is None else (str(found.state), int(found.attempt))


def for_attempt(conn: Conn, key: str, attempt: int) -> list[Ticket]:
    """The tickets of one attempt of an action, newest first, with the database clock."""
    stmt = (
        select(approvals, dialect_of(conn.dialect.name).now().label("now"))
        .where(approvals.c.key == key, approvals.c.for_attempt == attempt)
        .order_by(approvals.c.requested_at.desc(), approvals.c.ticket)
    )
    return [dict(r) for r in conn.execute(stmt).mappings()]


def for_call(conn: Conn, run_id: str, call_id: str) -> list[Ticket]:
    """The tickets opened for a framework's call id in a run, oldest first, with the clock."""
    stmt = (
        select(approvals, dialect_of(conn.dialect.name).now().label("now"))
        .where(approvals.c.run_id == run_id, approvals.c.call_id == call_id)
        .order_by(approvals.c.requested_at, approvals.c.ticket)
    )
    return [dict(r) for r in conn.execute(stmt).mappings()]


def insert(conn: Conn, row: Ticket) -> None:
    conn.execute(approvals.insert().values(**row))


def spend(conn: Conn, ticket: str, signature: str) -> None:
    """The yes is used by the attempt it allowed (only while it is still an unspent yes)."""
    conn.execute(
        update(approvals)
        .where(approvals.c.ticket == ticket, approvals.c.state == "approved")
        .values(state="spent", spent_at=dialect_of(conn.dialect.name).now(), signature=signature)
    )


def locked(conn: Conn, ticket: str) -> Ticket | None:
    """One ticket under its row lock (PostgreSQL), with the database clock."""
    dialect = dialect_of(conn.dialect.name)
    query = select(approvals, dialect.now().label("now")).where(approvals.c.ticket == ticket)
    found = conn.execute(dialect.locked(query)).mappings().first()
    return None if found is None else dict(found)


def decide(
    conn: Conn, ticket: str, *, was: str, state: str, by: str, reason: str | None, signature: str
) -> None:
    """A person's answer, written only over the state it was given for."""
    conn.execute(
        update(approvals)
        .where(approvals.c.ticket == ticket, approvals.c.state == was)
        .values(
            state=state,
            decided_by=by,
            decided_at=dialect_of(conn.dialect.name).now(),
            reason=reason,
            signature=signature,
        )
    )


def listed(store: Store, *, run_id: str | None, state: str | None, key: str | None) -> list[Ticket]:
    stmt = select(approvals).order_by(approvals.c.requested_at)
    if key is not None:
        stmt = stmt.where(approvals.c.key == key)
    if run_id is not None:
        stmt = stmt.where(approvals.c.run_id == run_id)
    if state is not None:
        stmt = stmt.where(approvals.c.state == state)
    return store.dicts(stmt)


@dataclass(frozen=True)
class WaitingFilter:
    """Which waiting tickets a person wants to see, and in what order. Text filters match
    anywhere in the value (``search``: in the run id, the tool or the arguments as shown, where a
    redacted value is ``***``, so it finds no secret)."""

    tool: str | None = None
    run_id: str | None = None
    kind: str | None = None
    asked_by: str | None = None
    search: str | None = None
    older_than: float | None = None  # seconds waited at least, by the database clock
    sort: str = "oldest"  # oldest | newest | expiring


SORTS = ("oldest", "newest", "expiring")


def _waiting_conds(store: Store, f: WaitingFilter) -> list[ColumnElement[bool]]:
    now = dialect_of(store.dialect).now()
    c = approvals.c
    conds: list[ColumnElement[bool]] = [c.state == "pending", c.expires_at > now]
    if f.tool:
        conds.append(c.tool == f.tool)
    if f.kind:
        conds.append(c.kind == f.kind)
    for column, text in ((c.run_id, f.run_id), (c.asked_by, f.asked_by)):
        if text:
            conds.append(column.contains(text, autoescape=True))
    if f.search:
        conds.append(
            or_(*(col.contains(f.search, autoescape=True) for col in (c.run_id, c.tool, c.args)))
        )
    if f.older_than is not None:
        conds.append(c.requested_at <= now - f.older_than)
    return conds


def waiting_page(store: Store, f: WaitingFilter, *, after: str | None, limit: int) -> list[Ticket]:
    """One page of the waiting tickets ``f`` selects, in its order, starting after the ticket
    ``after`` (keyset paging: by that ticket's sort value, then ticket id for ties, so a page is
    served by the index however deep it is). An ``after`` that is no ticket gives []."""
    by = approvals.c.expires_at if f.sort == "expiring" else approvals.c.requested_at
    down = f.sort == "newest"
    conds = _waiting_conds(store, f)
    with store.read() as conn:
        if after is not None:
            mark = conn.execute(select(by).where(approvals.c.ticket == after)).scalar()
            if mark is None:
                return []
            beyond = (by < mark) if down else (by > mark)
            tie = (approvals.c.ticket < after) if down else (approvals.c.ticket > after)
            conds.append(or_(beyond, and_(by == mark, tie)))
        order = (by.desc(), approvals.c.ticket.desc()) if down else (by, approvals.c.ticket)
        stmt = select(approvals).where(*conds).order_by(*order).limit(limit)
        return [dict(r) for r in conn.execute(stmt).mappings()]


def waiting_total(store: Store, f: WaitingFilter) -> int:
    return int(store.scalar(select(func.count()).where(*_waiting_conds(store, f))))


def waiting_counts(store: Store, run_ids: Sequence[str]) -> dict[str, int]:
    stmt = (
        select(approvals.c.run_id, func.count())
        .where(
            approvals.c.run_id.in_(list(run_ids)),
            approvals.c.state == "pending",
            approvals.c.expires_at > dialect_of(store.dialect).now(),
        )
        .group_by(approvals.c.run_id)
    )
    return {run_id: int(n) for run_id, n in store.rows(stmt)}


def last_asked(store: Store, run_ids: Sequence[str]) -> dict[tuple[str, str], float]:
    """When each of these runs last asked about each tool, in any state: one read of the runs'
    tickets (``c4a_approvals_run``) for a whole page of them."""
    asked = func.max(approvals.c.requested_at)
    stmt = (
        select(approvals.c.run_id, approvals.c.tool, asked)
        .where(approvals.c.run_id.in_(list(run_ids)))
        .group_by(approvals.c.run_id, approvals.c.tool)
    )
    return {(run, tool): float(at) for run, tool, at in store.rows(stmt)}


def one(store: Store, ticket: str) -> Ticket | None:
    return next(iter(store.dicts(select(approvals).where(approvals.c.ticket == ticket))), None)
