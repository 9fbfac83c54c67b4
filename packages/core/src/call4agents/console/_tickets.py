"""A waiting ticket: its card (what it will run, what its run already did), its page, and one
decision on it, refused unless the page showed this ticket, these arguments, still open."""

from __future__ import annotations

import time
from dataclasses import dataclass
from urllib.parse import parse_qsl

from starlette.responses import Response

from call4agents import EffectRecord, Ledger
from call4agents.engine.approvals import ApprovalRequest, superseded
from call4agents.model.ages import ago

from ._auth import Refused
from ._changes import APPROVED, Comparison, changes
from ._format import count_redacted
from ._listing import address, local_address, with_param
from ._ticket_filters import FILTERS, where_of
from ._web import Ask, decision_form, fingerprint, page, redirect

LIST_KEYS = (*FILTERS, "view")  # what a ticket's page keeps of the list it was opened from
SHOWN_ACTIONS = 20  # of the run's finished actions beside a ticket
DECISIONS = {"approve": "approved", "deny": "denied"}


@dataclass(frozen=True)
class Finished:
    """One of the run's finished actions beside a ticket: what it did, or why it did not."""

    tool: str
    state: str
    outcome: str


@dataclass(frozen=True)
class Card:
    """A ticket as its card shows it (``_tickets.html``)."""

    request: ApprovalRequest
    masked: int  # values redacted in its arguments
    stale: bool  # its run has asked about the same tool again since
    changes: Comparison | None
    done: list[Finished]
    fingerprint: str
    now: float


@dataclass(frozen=True)
class Decided:
    """The ticket a person just decided, as the page the decision returned to names it."""

    request: ApprovalRequest
    verb: str


def card(ledger: Ledger, request: ApprovalRequest, now: float, *, stale: bool) -> Card:
    # One read per ticket: the run's actions, this one among them once it has run (or failed).
    actions = ledger.effects(request.run_id, limit=SHOWN_ACTIONS * 5)
    return Card(
        request=request,
        masked=count_redacted(request.args),
        stale=stale,
        changes=changes(request, ledger.approvals(request.run_id)),
        done=finished_actions(actions),
        fingerprint=fingerprint(request),
        now=now,
    )


def finished_actions(records: list[EffectRecord]) -> list[Finished]:
    done = [r for r in records if r.state in ("succeeded", "failed")][-SHOWN_ACTIONS:]
    return [
        Finished(r.tool, "done", r.result_json or "(no result stored)")
        if r.state == "succeeded"
        else Finished(r.tool, "failed (did not act)", r.error or "")
        for r in done
    ]


def ticket_page(ledger: Ledger, ask: Ask) -> Response:
    request = ticket_of(ledger, ask.path["ticket"])
    now = time.time()
    stale = request.ticket in superseded(ledger, [request])
    back = address("/", ask.query, LIST_KEYS)
    open_now = request.is_open(now)
    return page(
        "ticket.html",
        ask.who,
        decided=decided_notice(ledger, ask),
        card=card(ledger, request, now, stale=stale),
        form=decision_form(ask, back, then_next=True) if open_now else None,
        settled=None if open_now else settled_text(request, now),
        back=back,
        filtered=back != "/",
    )


def decide(ledger: Ledger, ask: Ask) -> Response:
    """One decision, refused unless the page showed this ticket, these arguments, still open."""
    ticket = ask.path["ticket"]
    wanted = DECISIONS.get(ask.form.get("decision", ""))
    if wanted is None:
        raise Refused(400, "say approve or deny: nothing was decided")
    reason = ask.form.get("reason", "").strip() or None
    decide_one(ledger, ticket, ask.form.get("fingerprint"), wanted, ask.who.name, reason)
    back = local_address(ask.form.get("back"), "/")
    if ask.form.get("then") == "next":
        return after_decision(ledger, back, ticket)
    return redirect(with_param(back, "decided", ticket))


def after_decision(ledger: Ledger, back: str, ticket: str) -> Response:
    """Decided on a ticket's own card: the next ticket of the same filter comes up, on its
    card (the inbox as filtered when none is left), saying what was just decided."""
    query = dict(parse_qsl(back.partition("?")[2]))
    upcoming, _ = ledger.waiting_page(where_of(query), limit=1)
    if upcoming:
        card_page = f"/approvals/{upcoming[0].ticket}"
        return redirect(address(card_page, {**query, "decided": ticket}, (*LIST_KEYS, "decided")))
    return redirect(with_param(back, "decided", ticket))


def decide_one(
    ledger: Ledger, ticket: str, shown: str | None, wanted: str, me: str, reason: str | None
) -> ApprovalRequest:
    request = ticket_of(ledger, ticket)
    if shown != fingerprint(request):
        raise Refused(409, moved_text(ticket))
    now = time.time()
    if request.state != "pending":
        raise Refused(409, too_late(request, wanted, me, now))
    act = ledger.approve if wanted == "approved" else ledger.deny
    out = act(ticket, by=me, reason=reason, only_if_pending=True)
    if out.state != wanted or out.decided_by != me:
        raise Refused(409, too_late(out, wanted, me, now))
    return out


def moved_text(ticket: str) -> str:
    return (
        f"ticket {ticket}'s arguments are not the ones your page showed: nothing was "
        "decided; reload the ticket and decide on what it shows now"
    )


def too_late(request: ApprovalRequest, wanted: str, me: str, now: float) -> str:
    if request.decided_by == me and request.state in (wanted, "spent"):
        return f"you already {verb(request).lower()} ticket {request.ticket}"
    return f"{settled_text(request, now)}: your decision was not recorded"


def settled_text(request: ApprovalRequest, now: float) -> str:
    t, by = request.ticket, request.decided_by or "someone"
    why = f" ({request.reason})" if request.reason else ""
    if request.state == "approved":
        return f"ticket {t} was already approved by {by}{why}"
    if request.state == "denied":
        return f"ticket {t} was already denied by {by}{why}"
    if request.state == "spent":
        return f"ticket {t} was approved by {by}{why} and the action has run"
    if request.expires_at <= now:
        return f"ticket {t} expired {ago(request.expires_at, now)} without a decision"
    return f"ticket {t} is {request.state}"


def ticket_of(ledger: Ledger, ticket: str) -> ApprovalRequest:
    found = ledger.approval(ticket)
    if found is None:
        raise Refused(404, missing_text(ticket))
    return found


def missing_text(ticket: str) -> str:
    return (
        f"there is no approval ticket {ticket!r} in this ledger: check the link, or see the inbox"
    )


def verb(request: ApprovalRequest) -> str:
    return "Approved" if request.state in APPROVED else "Denied"


def decided_notice(ledger: Ledger, ask: Ask) -> Decided | None:
    """The ticket just decided (``decided=`` in the address), if this person decided it."""
    decided = ask.query.get("decided")
    found = ledger.approval(decided) if decided else None
    if found is None or found.decided_by != ask.who.name:
        return None
    return Decided(found, verb(found))
