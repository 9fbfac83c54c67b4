"""The approvals inbox: the waiting tickets a person asked for, one line or one card each, and
the decision on several ticked at once."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from starlette.responses import Response

from call4agents import Ledger, LedgerError, WaitingFilter
from call4agents.engine.approvals import ApprovalRequest, superseded

from ._auth import Refused
from ._listing import QUEUE_PAGE, address, local_address, pick, queue_pages, with_param
from ._ticket_filters import FILTERS, filters, where_of
from ._tickets import (
    DECISIONS,
    LIST_KEYS,
    card,
    decide_one,
    decided_notice,
    missing_text,
    moved_text,
    too_late,
    verb,
)
from ._web import Ask, decision_form, fingerprint, page, redirect

VIEWS = ("list", "cards")
BRIEF_ARGS, BRIEF_WIDTH = 4, 40  # arguments on a ticket's line, and each value's width there
MAX_BULK = 100
PICK = "pick."  # a ticked ticket's field: pick.<ticket> = the fingerprint its card showed
# Where a decision on ticked tickets returns: the tickets it decided, and those it did not
# (each comma-separated); the inbox says why not from what each ticket is now.
DONE, REFUSED = "done", "refused"


@dataclass(frozen=True)
class Line:
    """A ticket on one line of the inbox (``_tickets.html``)."""

    request: ApprovalRequest
    brief: str
    whole: bool  # the line shows every argument in full, so a tick may decide on it
    stale: bool
    fingerprint: str
    now: float


@dataclass(frozen=True)
class Outcome:
    """What became of one ticked ticket, as the inbox says it after the decision."""

    ticket: str
    done: bool
    verb: str = ""
    tool: str = ""
    run_id: str = ""
    said: str = ""


def inbox(ledger: Ledger, ask: Ask) -> Response:
    where, after = where_of(ask.query), ask.query.get("after") or None
    view = pick(ask.query, "view", VIEWS, default="list")
    live, total = ledger.waiting_page(where, after=after, limit=QUEUE_PAGE)
    filtered = where != WaitingFilter() or after is not None
    now = time.time()
    stale = superseded(ledger, live) if live else set()
    back = address("/", ask.query, (*LIST_KEYS, "after"))  # to come back to after a decision
    # Live updates only on the first page unfiltered: elsewhere news would replace what a
    # person is paging through.
    return page(
        "inbox.html",
        ask.who,
        live=not filtered,
        here="/",
        ids=",".join(r.ticket for r in live),
        decided=decided_notice(ledger, ask),
        ticked=ticked_outcomes(ledger, ask),
        filters=filters(where, ask.query),
        filtered=filtered,
        total=total,
        view=view,
        other=_other_view(ask.query, view),
        opened=address("", ask.query, LIST_KEYS),
        lines=[_line(r, now, r.ticket in stale) for r in live] if view == "list" else [],
        cards=[card(ledger, r, now, stale=r.ticket in stale) for r in live]
        if view == "cards"
        else [],
        form=decision_form(ask, back, pick=True),
        pages=queue_pages("/", ask.query, (*FILTERS, "view"), [r.ticket for r in live], total),
        size=QUEUE_PAGE,
    )


def _other_view(query: dict[str, str], view: str) -> dict[str, str]:
    """A link to the other way of showing the same tickets."""
    other = "cards" if view == "list" else "list"
    href = address("/", {**query, "view": other}, (*FILTERS, "after", "view"))
    said = "Show each ticket's full card" if other == "cards" else "Show one line a ticket"
    return {"href": href, "said": said}


def _line(request: ApprovalRequest, now: float, stale: bool) -> Line:
    text, whole = brief(request.args)
    return Line(request, text, whole, stale, fingerprint(request), now)


def brief(args: dict[str, Any]) -> tuple[str, bool]:
    """The arguments on one line, each value cut short (a redacted one reads ``***``, as
    everywhere), and whether the line shows them all in full."""
    parts, whole = [], len(args) <= BRIEF_ARGS
    for name, value in list(args.items())[:BRIEF_ARGS]:
        text = json.dumps(value, ensure_ascii=False, default=str, separators=(",", ":"))
        whole = whole and len(text) <= BRIEF_WIDTH
        cut = text if len(text) <= BRIEF_WIDTH else text[: BRIEF_WIDTH - 1] + "\u2026"
        parts.append(f"{name}={cut}")
    more = len(args) - BRIEF_ARGS
    return ", ".join(parts) + (f", and {more} more" if more > 0 else ""), whole


def bulk_decide(ledger: Ledger, ask: Ask) -> Response:
    """Each ticked ticket decided on its own, with the same checks as one decision; then the
    inbox as it was filtered, its next tickets up, saying what became of each ticked one."""
    wanted = DECISIONS.get(ask.form.get("decision", ""))
    if wanted is None:
        raise Refused(400, "say approve or deny: nothing was decided")
    picked = {k[len(PICK) :]: v for k, v in ask.form.items() if k.startswith(PICK)}
    if not picked:
        raise Refused(400, "tick at least one ticket: nothing was decided")
    if len(picked) > MAX_BULK:
        raise Refused(400, f"tick at most {MAX_BULK} tickets at once: nothing was decided")
    reason = ask.form.get("reason", "").strip() or None
    done, refused = [], []
    for ticket, shown in picked.items():
        try:
            decide_one(ledger, ticket, shown, wanted, ask.who.name, reason)
            done.append(ticket)
        except (Refused, LedgerError):  # e.g. expired since the page showed it
            refused.append(ticket)
    back = with_param(local_address(ask.form.get("back"), "/"), "bulk", ask.form["decision"])
    back = with_param(back, DONE, ",".join(done)) if done else back
    return redirect(with_param(back, REFUSED, ",".join(refused)) if refused else back)


def ticked_outcomes(ledger: Ledger, ask: Ask) -> list[Outcome]:
    """What became of each ticket of the decision on ticked tickets this page returns from
    (``bulk=``, ``done=`` and ``refused=`` in its address): decided by this person as asked,
    or why not, as the ticket stands now."""
    wanted = DECISIONS.get(ask.query.get("bulk", ""))
    if wanted is None:
        return []
    now, me = time.time(), ask.who.name
    done, refused = (_ids(ask.query.get(name, "")) for name in (DONE, REFUSED))
    found = []
    for ticket in [*done, *refused][:MAX_BULK]:
        request = ledger.approval(ticket)
        if request is None:
            found.append(Outcome(ticket, False, said=missing_text(ticket)))
        elif ticket in done and request.decided_by == me and _as_asked(request.state, wanted):
            found.append(Outcome(ticket, True, verb(request), request.tool, request.run_id))
        elif request.is_open(now):
            found.append(Outcome(ticket, False, said=moved_text(ticket)))
        else:
            found.append(Outcome(ticket, False, said=too_late(request, wanted, me, now)))
    return found


def _ids(listed: str) -> list[str]:
    return [t for t in listed.split(",") if t]


def _as_asked(state: str, wanted: str) -> bool:
    return state == wanted or (state, wanted) == ("spent", "approved")
