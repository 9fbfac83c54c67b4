"""The audit: every decision and settlement, written in its own transaction, read newest first.

A row is only ever inserted, in the same transaction as the decision it records, so a decision
that committed always has its row, and one that rolled back never does. ``gc`` and
``delete_run`` leave the audit alone.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from sqlalchemy import or_, select

from call4agents.model.errors import ConfigurationError

from .dialects import dialect_of
from .tables import approvals, audit, effects

if TYPE_CHECKING:
    from .store import Conn, Store

ACTIONS = ("approved", "denied", "happened", "did_not_happen")


@dataclass(frozen=True)
class AuditEntry:
    """One decision: a yes or no to a ticket, or an in-doubt action settled."""

    id: int
    at: float
    actor: str  # who decided: the person, or "check" for a reconciler
    action: str  # approved | denied | happened | did_not_happen
    run_id: str
    tool: str
    key: str  # the action's key
    ticket: str | None  # the ticket, for approved and denied
    attempt: int | None  # the attempt settled, for happened and did_not_happen
    reason: str | None  # the reason given, or the settlement's note

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


_FIELDS = [audit.c[f.name] for f in fields(AuditEntry)]


def write(conn: Conn, **values: Any) -> None:
    """Record one decision inside the transaction that makes it."""
    assert values["action"] in ACTIONS, values["action"]
    conn.execute(audit.insert().values(at=dialect_of(conn.dialect.name).now(), **values))


def entries(
    store: Store,
    *,
    actor: str | None = None,
    action: str | None = None,
    run_id: str | None = None,
    tool: str | None = None,
    since: float | None = None,
    before: int | None = None,
    limit: int = 100,
) -> list[AuditEntry]:
    """Newest first (by time, ties by id); ``before`` the id of the last entry of the page before
    (keyset paging: the page goes on from that entry's time, so each page costs the same)."""
    # The entry's fields in order, each row made positionally: by name (``**row``) an export of
    # 10,000 spent as long making entries as reading them.
    query = select(*_FIELDS).order_by(audit.c.at.desc(), audit.c.id.desc()).limit(limit)
    chosen = ((audit.c.actor, actor), (audit.c.action, action), (audit.c.run_id, run_id))
    for column, value in (*chosen, (audit.c.tool, tool)):
        if value is not None:
            query = query.where(column == value)
    if since is not None:
        query = query.where(audit.c.at >= since)
    with store.read() as conn:
        if before is not None:
            last = conn.execute(select(audit.c.at).where(audit.c.id == before)).scalar()
            if last is None:  # entries are never deleted: the id was never one
                raise ConfigurationError(
                    f"no audit entry has id {before}: page on from the id of the last entry "
                    "a page showed"
                )
            # Written so each filter's index serves it as one range: (at, id) < (last, before).
            query = query.where(audit.c.at <= last, or_(audit.c.at < last, audit.c.id < before))
        return [AuditEntry(*row) for row in conn.execute(query)]


def arguments(store: Store, found: list[AuditEntry]) -> dict[int, str | None]:
    """By entry id, the arguments each decision was about as canonical JSON, redacted values
    masked as the ticket's card showed them: the ticket's for a yes or no, the action's for a
    settlement; None where ``gc`` has since removed them. A read or two for any number of
    entries (``among``: on PostgreSQL one array parameter, where a list of 10,000 bound
    parameters took 0.3 s to send and plan, and the export of 10,000 entries 0.6 s)."""
    tickets = sorted({e.ticket for e in found if e.ticket is not None})
    keys = sorted({e.key for e in found if e.ticket is None})
    asked_for = select(approvals.c.ticket, approvals.c.args)
    acted_on = select(effects.c.key, effects.c.args)
    with store.read() as conn:
        among = dialect_of(conn.dialect.name).among
        asked = {
            ticket: args
            for where in among(approvals.c.ticket, tickets)
            for ticket, args in conn.execute(asked_for.where(where))
        }
        acted = {
            key: args
            for where in among(effects.c.key, keys)
            for key, args in conn.execute(acted_on.where(where))
        }
    return {e.id: asked.get(e.ticket) if e.ticket is not None else acted.get(e.key) for e in found}


def as_records(found: list[AuditEntry], args: Mapping[int, str | None]) -> list[dict[str, Any]]:
    """The entries as JSON-ready dicts, each with the arguments decided on (see ``arguments``)."""
    return [{**e.as_dict(), "args": json.loads(args.get(e.id) or "null")} for e in found]


def as_csv(found: list[AuditEntry], args: Mapping[int, str | None] | None = None) -> str:
    """The entries as CSV with a header row, times in ISO 8601 (UTC): for a spreadsheet; with
    ``args`` (see ``arguments``) a last column of the arguments decided on."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(_COLUMNS + (["args"] if args is not None else []))
    for entry in found:  # a tuple per row: asdict() copied each entry deeply, most of the time
        row = [getattr(entry, name) for name in _COLUMNS]
        row[_AT] = datetime.fromtimestamp(entry.at, tz=timezone.utc).isoformat()
        writer.writerow(row if args is None else [*row, args.get(entry.id)])
    return out.getvalue()


_COLUMNS = [f.name for f in fields(AuditEntry)]
_AT = _COLUMNS.index("at")
