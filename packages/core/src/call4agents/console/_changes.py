"""What changed since this run last asked about the same tool, argument by argument.

A redacted value shows as ``***`` on every ticket, so two refunds to different cards look alike.
Each ticket keeps, per argument holding a redacted value, a digest of it under the ledger's salt
(``redacted_marks``): the page compares those and says "differs" or "same" without the value.
A value that is not redacted is shown beside the earlier one: was this, now that.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from call4agents.engine.approvals import ApprovalRequest

from ._format import count_redacted

APPROVED = ("approved", "spent")
SHOWN_WIDTH = 120  # characters of a value shown beside its earlier one
_MISSING = object()


@dataclass(frozen=True)
class Verdict:
    """One argument against an earlier ticket. ``kind``: absent (in one ticket only), same or
    moved (neither redacted: ``value`` now, ``old`` before), unknown, same-redacted or
    differs-redacted (compared by digest)."""

    kind: str
    value: str | None = None
    old: str | None = None
    note: str = ""


@dataclass(frozen=True)
class Row:
    name: str
    verdicts: list[Verdict]


@dataclass(frozen=True)
class Comparison:
    """The table ``_tickets.html`` draws: a column for each earlier ticket compared with."""

    against: list[ApprovalRequest]
    headers: list[str]
    rows: list[Row]


def changes(request: ApprovalRequest, tickets: list[ApprovalRequest]) -> Comparison | None:
    """The comparison for ``request``, given its run's tickets (oldest first); None the first
    time the run asks about this tool."""
    earlier = [
        t
        for t in tickets
        if t.tool == request.tool
        and t.ticket != request.ticket
        and t.requested_at <= request.requested_at
    ]
    if not earlier:
        return None
    last = earlier[-1]
    approved = next((t for t in reversed(earlier) if t.state in APPROVED), None)
    against = [("the last ticket", last)]
    if approved is not None and approved is not last:
        against.append(("the last approved", approved))
    elif approved is last:
        against = [("the last ticket, approved", last)]
    names = list(dict.fromkeys([*request.args, *(n for _, t in against for n in t.args)]))
    return Comparison(
        against=[t for _, t in against],
        headers=["Argument", *(f"vs {name} ({_said(t)})" for name, t in against)],
        rows=[Row(n, [_verdict(request, t, n) for _, t in against]) for n in names],
    )


def _said(ticket: ApprovalRequest) -> str:
    if ticket.state in APPROVED:
        return f"approved by {ticket.decided_by or 'someone'}"
    if ticket.state == "denied":
        return f"denied by {ticket.decided_by or 'someone'}"
    return "not decided"


def _verdict(request: ApprovalRequest, other: ApprovalRequest, name: str) -> Verdict:
    mine, theirs = request.args.get(name, _MISSING), other.args.get(name, _MISSING)
    if mine is _MISSING or theirs is _MISSING:
        there = theirs if mine is _MISSING else mine
        note = "not in this ticket" if mine is _MISSING else "new in this ticket"
        return Verdict("absent", value=None if _masked(there) else _shown(there), note=note)
    if not (_masked(mine) or _masked(theirs)):
        # Neither value is redacted: the page shows both, so a person sees what moved.
        if mine == theirs:
            return Verdict("same", value=_shown(mine))
        return Verdict("moved", value=_shown(mine), old=_shown(theirs))
    marks = [(t.redacted_marks or {}).get(name) for t in (request, other)]
    if not (_masked(mine) and _masked(theirs)) or None in marks:
        # A value masked on one side only, or one that reads *** without being redacted (no mark).
        return Verdict("unknown")
    return Verdict("same-redacted" if marks[0] == marks[1] else "differs-redacted")


def _shown(value: Any) -> str:
    """A value as compact JSON, cut short if it is long (the card above has it whole)."""
    text = json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
    return text if len(text) <= SHOWN_WIDTH else text[: SHOWN_WIDTH - 1] + "\u2026"


def _masked(value: Any) -> bool:
    return count_redacted(value) > 0
