"""What changed since this run last asked about the same tool, argument by argument.

A redacted value shows as ``***`` on every ticket, so two refunds to different cards look alike.
Each ticket keeps, per argument holding a redacted value, a digest of it under the ledger's salt
(``redacted_marks``): the page compares those and says "differs" or "same" without the value.
A value that is not redacted is shown beside the earlier one: was this, now that.
"""

from __future__ import annotations

import json
from typing import Any

from call4agents.engine.approvals import ApprovalRequest

from ._html import Html, count_redacted, h, join, table

APPROVED = ("approved", "spent")
SHOWN_WIDTH = 120  # characters of a value shown beside its earlier one
_MISSING = object()


def changes(request: ApprovalRequest, tickets: list[ApprovalRequest]) -> Html:
    """The comparison block for ``request``, given its run's tickets (oldest first)."""
    earlier = [
        t
        for t in tickets
        if t.tool == request.tool
        and t.ticket != request.ticket
        and t.requested_at <= request.requested_at
    ]
    if not earlier:
        return h('<p class="changes">The first time this run asks about this tool.</p>')
    last = earlier[-1]
    approved = next((t for t in reversed(earlier) if t.state in APPROVED), None)
    against = [("the last ticket", last)]
    if approved is not None and approved is not last:
        against.append(("the last approved", approved))
    elif approved is last:
        against = [("the last ticket, approved", last)]
    headers = ["Argument", *(f"vs {name} ({_said(t)})" for name, t in against)]
    names = list(dict.fromkeys([*request.args, *(n for _, t in against for n in t.args)]))
    rows = [
        [h("<code>{n}</code>", n=n), *(_verdict(request, t, n) for _, t in against)] for n in names
    ]
    links = join(
        h(' <a href="/approvals/{t}"><code>{t}</code></a>', t=t.ticket) for _, t in against
    )
    return h(
        '<div class="changes"><h3>What changed since this run last asked</h3>'
        "<p>Compared with{links}.</p>{table}</div>",
        links=links,
        table=table(headers, rows, "changes"),
    )


def _said(ticket: ApprovalRequest) -> str:
    if ticket.state in APPROVED:
        return f"approved by {ticket.decided_by or 'someone'}"
    if ticket.state == "denied":
        return f"denied by {ticket.decided_by or 'someone'}"
    return "not decided"


def _verdict(request: ApprovalRequest, other: ApprovalRequest, name: str) -> Html:
    mine, theirs = request.args.get(name, _MISSING), other.args.get(name, _MISSING)
    if mine is _MISSING or theirs is _MISSING:
        there = theirs if mine is _MISSING else mine
        value = Html() if _masked(there) else h(" <code>{v}</code>", v=_shown(there))
        return h(
            '<span class="differs">differs: {w}</span>{v}', w=_absent(mine is _MISSING), v=value
        )
    if not (_masked(mine) or _masked(theirs)):
        # Neither value is redacted: the page shows both, so a person sees what moved.
        if mine == theirs:
            return h('<span class="same">same</span> <code>{v}</code>', v=_shown(mine))
        return h(
            '<span class="differs">differs</span>: was <code>{old}</code>, now <code>{new}</code>',
            old=_shown(theirs),
            new=_shown(mine),
        )
    marks = [(t.redacted_marks or {}).get(name) for t in (request, other)]
    if not (_masked(mine) and _masked(theirs)) or None in marks:
        # A ticket from before the ledger kept digests, or a value masked on one side only.
        return h('<span class="unknown">cannot tell: redacted, and not comparable</span>')
    return _word(marks[0] == marks[1], " (redacted: the value is not shown)")


def _shown(value: Any) -> str:
    """A value as compact JSON, cut short if it is long (the card above has it whole)."""
    text = json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
    return text if len(text) <= SHOWN_WIDTH else text[: SHOWN_WIDTH - 1] + "\u2026"


def _masked(value: Any) -> bool:
    return count_redacted(value) > 0


def _word(same: bool, note: str) -> Html:
    if same:
        return h('<span class="same">same{n}</span>', n=note)
    return h('<span class="differs">differs{n}</span>', n=note)


def _absent(in_this: bool) -> str:
    return "not in this ticket" if in_this else "new in this ticket"
