"""Webhook events given up on: recorded, listed, counted and marked replayed.

A dead letter is written once, when a delivery is abandoned, and marked replayed once, by the
first replay that delivers it: ``mark_replayed`` only changes a row not yet marked, so two replays
racing over the same letter report it delivered once.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import func, select, update

from .store import Store, clock
from .tables import dead_letters


@dataclass(frozen=True)
class DeadLetter:
    id: int
    receiver: str
    event: str  # JSON
    error: str
    attempts: int
    created_at: float
    replayed_at: float | None


def record(store: Store, receiver: str, event: str, error: str, attempts: int) -> int:
    with store.tx() as conn:
        row = conn.execute(
            dead_letters.insert()
            .values(
                receiver=receiver,
                event=event,
                error=error[:2000],
                attempts=attempts,
                created_at=clock(conn),
            )
            .returning(dead_letters.c.id)
        ).scalar_one()
    return int(row)


def waiting(store: Store, *, limit: int = 100, after: int = 0) -> list[DeadLetter]:
    """Letters not yet replayed, oldest first, from after id ``after`` (keyset paging)."""
    query = (
        select(dead_letters)
        .where(dead_letters.c.replayed_at.is_(None), dead_letters.c.id > after)
        .order_by(dead_letters.c.id)
        .limit(limit)
    )
    return [DeadLetter(*row) for row in store.rows(query)]


def count_waiting(store: Store) -> int:
    return int(store.scalar(select(func.count()).where(dead_letters.c.replayed_at.is_(None))))


def mark_replayed(store: Store, ident: int) -> bool:
    """True if this call marked it (it was not marked before)."""
    with store.tx() as conn:
        done = conn.execute(
            update(dead_letters)
            .where(dead_letters.c.id == ident, dead_letters.c.replayed_at.is_(None))
            .values(replayed_at=clock(conn))
        )
    return done.rowcount == 1
