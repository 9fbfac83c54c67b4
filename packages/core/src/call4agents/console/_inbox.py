"""The approvals inbox: what each pending ticket will run, what its run already did, decide."""

from __future__ import annotations

import json
import time
from typing import Any
from urllib.parse import parse_qsl, urlencode

from starlette.responses import Response

from call4agents import EffectRecord, Ledger, WaitingFilter
from call4agents.engine.approvals import ApprovalRequest, superseded

from ._auth import Refused
from ._changes import changes
from ._html import Html, ago, clock, count_redacted, esc, h, hidden, join, json_block, page
from ._listing import kept, local_address, with_param
from ._waiting import FILTERS, SHOWN, filters, pages, where_of
from ._web import Ask, fingerprint, html, redirect

VIEWS = ("list", "cards")
LIST_KEYS = (*FILTERS, "view")  # what a ticket's page keeps of the list it was opened from
BRIEF_ARGS, BRIEF_WIDTH = 4, 40  # arguments on a ticket's line, and each value's width there
CUT_NOTE = Html(' <span class="note">arguments cut short: open the card to decide</span>')
SUPERSEDED_MARK = Html(' <span class="superseded">superseded</span>')
ROW_KEYS = Html(
    '<p class="keys">Keys: <kbd>j</kbd> and <kbd>k</kbd> go to the next and previous ticket; '
    "<kbd>o</kbd> opens its card.</p>"
)
MAX_BULK = 100
PICK = "pick."  # a ticked ticket's field: pick.<ticket> = the fingerprint its card showed
SHOWN_ACTIONS = 20  # of the run's finished actions beside a ticket
DECISIONS = {"approve": "approved", "deny": "denied"}
NOT_RECORDED = "not recorded (a ticket opened before the ledger kept it)"
KEYS = Html(
    '<p class="keys">Keys: <kbd>j</kbd> and <kbd>k</kbd> go to the next and previous ticket; '
    "<kbd>a</kbd> approves it, <kbd>d</kbd> denies it, each after you confirm.</p>"
)


def inbox(ledger: Ledger, ask: Ask) -> Response:
    where, after = where_of(ask.query), ask.query.get("after") or None
    view = ask.query.get("view") or "list"
    if view not in VIEWS:
        raise Refused(400, f"unknown view {view!r}: pick one of {', '.join(VIEWS)}")
    live, total = ledger.waiting_page(where, after=after, limit=SHOWN)
    filtered = where != WaitingFilter() or after is not None
    now = time.time()
    notice = _notice(ledger, ask)
    if not live:
        empty = "No approvals waiting match." if filtered else "No approvals waiting."
        body = h('{n}{f}<p class="empty">{e}</p>', n=notice, f=filters(where, ask.query), e=empty)
    else:
        back = _here(ask.query)
        stale = superseded(ledger, live)
        shown = (
            join(_card(ledger, r, ask, now, back, pick=True, stale=r.ticket in stale) for r in live)
            if view == "cards"
            else _rows(live, ask, now, stale)
        )
        body = join(
            [
                notice,
                filters(where, ask.query),
                h(
                    "<p>{n} waiting{m}. {v}</p>",
                    n=total,
                    m=" match" if filtered else "",
                    v=_views(ask.query, view),
                ),
                ROW_KEYS if view == "list" else (KEYS if ask.who.can_decide else Html()),
                _bulk(ask) if ask.who.can_decide else Html(),
                shown,
                pages(ask.query, live, total, after),
            ]
        )
    ids = ",".join(r.ticket for r in live)
    # Live updates only on the first page unfiltered: elsewhere news would replace what a
    # person is paging through.
    return html(
        page(
            "Approvals", ask.who.name, ask.who.role, _marked(body, ids), live=not filtered, here="/"
        )
    )


def _here(query: dict[str, str]) -> str:
    """This page of the inbox (its filters, view and place), to come back to after a decision."""
    kept_now = kept(query, (*LIST_KEYS, "after"))
    return "/" + (f"?{urlencode(kept_now)}" if kept_now else "")


def _views(query: dict[str, str], view: str) -> Html:
    """A link to the other way of showing the same tickets."""
    other = "cards" if view == "list" else "list"
    q = urlencode({**kept(query, (*FILTERS, "after")), "view": other})
    said = "Show each ticket's full card" if other == "cards" else "Show one line a ticket"
    return h('<a href="/?{q}">{s}</a>', q=q, s=said)


def _rows(tickets: list[ApprovalRequest], ask: Ask, now: float, stale: set[str]) -> Html:
    """One line a ticket: tool, run, the arguments in brief, how long it has waited; each line
    opens the full card (which keeps the filters, so a decision there goes on to the next)."""
    q = urlencode(kept(ask.query, LIST_KEYS))
    briefs = {r.ticket: brief(r.args) for r in tickets}
    return h(
        '<ul class="rows">{rows}</ul>',
        rows=join(
            h(
                '<li class="row" id="{t}" tabindex="-1">{pick}'
                '<a class="open" href="/approvals/{t}{q}"><code>{tool}</code> in run {run}</a>'
                '<span class="brief">{args}</span>'
                '<span class="age">waiting {waited}</span>{mark}{cut}</li>',
                t=r.ticket,
                q="?" + q if q else "",
                tool=r.tool,
                run=r.run_id,
                args=briefs[r.ticket][0],
                waited=ago(r.requested_at, now),
                # A tick binds a decision to the arguments the line showed: only a line that
                # shows them all in full has one; the others are decided on their card.
                pick=_tick(r) if ask.who.can_decide and briefs[r.ticket][1] else Html(),
                cut=CUT_NOTE if ask.who.can_decide and not briefs[r.ticket][1] else Html(),
                mark=SUPERSEDED_MARK if r.ticket in stale else Html(),
            )
            for r in tickets
        ),
    )


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


def _bulk(ask: Ask) -> Html:
    """One form for the tickets ticked on this page; each tick carries its own card's
    fingerprint, so each decision is bound to the arguments that card shows."""
    return h(
        '<form method="post" action="/approvals/bulk" id="bulk" class="bulk">{csrf}'
        "<fieldset><legend>Decide the tickets you tick below, each as its card shows it"
        "</legend>"
        '<label>Reason, for each <input name="reason"></label>'
        '<button name="decision" value="approve" class="approve">Approve ticked</button> '
        '<button name="decision" value="deny" class="deny">Deny ticked</button></fieldset>'
        "</form>",
        csrf=hidden("csrf", ask.csrf),
    )


def bulk_decide(ledger: Ledger, ask: Ask) -> Response:
    """Each ticked ticket decided on its own, with the same checks as one decision; the page
    says what became of each."""
    wanted = DECISIONS.get(ask.form.get("decision", ""))
    if wanted is None:
        raise Refused(400, "say approve or deny: nothing was decided")
    picked = {k[len(PICK) :]: v for k, v in ask.form.items() if k.startswith(PICK)}
    if not picked:
        raise Refused(400, "tick at least one ticket: nothing was decided")
    if len(picked) > MAX_BULK:
        raise Refused(400, f"tick at most {MAX_BULK} tickets at once: nothing was decided")
    reason = ask.form.get("reason", "").strip() or None
    lines = []
    for ticket, shown in picked.items():
        try:
            done = _decide_one(ledger, ticket, shown, wanted, ask.who.name, reason)
            word = "Approved" if wanted == "approved" else "Denied"
            lines.append(
                h(
                    '<li class="done">{w} <code>{tool}</code> in run {run} '
                    '(<a href="/approvals/{t}">{t}</a>).</li>',
                    w=word,
                    tool=done.tool,
                    run=done.run_id,
                    t=ticket,
                )
            )
        except Refused as refused:
            lines.append(
                h(
                    '<li class="error"><a href="/approvals/{t}">{t}</a>: {m}</li>',
                    t=ticket,
                    m=refused.message,
                )
            )
    body = h(
        '<h2>Each ticket you ticked</h2><ul class="bulk-result">{l}</ul>'
        '<p><a href="/">Back to the inbox</a></p>',
        l=join(lines),
    )
    return html(page("Bulk decision", ask.who.name, ask.who.role, body, here="/"))


def ticket_page(ledger: Ledger, ask: Ask) -> Response:
    request = _ticket(ledger, ask.path["ticket"])
    now = time.time()
    stale = request.ticket in superseded(ledger, [request])
    filters_q = urlencode(kept(ask.query, LIST_KEYS))
    back = "/" + (f"?{filters_q}" if filters_q else "")
    if request.state == "pending" and request.expires_at > now:
        shown = _card(ledger, request, ask, now, back, stale=stale, then_next=True)
    else:
        shown = join(
            [
                h('<p class="state">{s}</p>', s=_settled_text(request, now)),
                _details(ledger, request, now, stale=stale),
            ]
        )
    said = "Back to the inbox, as filtered" if filters_q else "Back to the inbox"
    body = join([_notice(ledger, ask), shown, h('<p><a href="{b}">{s}</a></p>', b=back, s=said)])
    return html(page(f"Ticket {request.ticket}", ask.who.name, ask.who.role, body))


def decide(ledger: Ledger, ask: Ask) -> Response:
    """One decision, refused unless the page showed this ticket, these arguments, still open."""
    ticket = ask.path["ticket"]
    wanted = DECISIONS.get(ask.form.get("decision", ""))
    if wanted is None:
        raise Refused(400, "say approve or deny: nothing was decided")
    reason = ask.form.get("reason", "").strip() or None
    _decide_one(ledger, ticket, ask.form.get("fingerprint"), wanted, ask.who.name, reason)
    back = local_address(ask.form.get("back"), "/")
    if ask.form.get("then") == "next":
        # Decided on its own card: the next ticket of the same filter comes up, on its card.
        query = dict(parse_qsl(back.partition("?")[2]))
        upcoming, _ = ledger.waiting_page(where_of(query), limit=1)
        if upcoming:
            filters_q = urlencode({**kept(query, LIST_KEYS), "decided": ticket})
            return redirect(f"/approvals/{upcoming[0].ticket}?{filters_q}")
    return redirect(with_param(back, "decided", ticket))


def _decide_one(
    ledger: Ledger, ticket: str, shown: str | None, wanted: str, me: str, reason: str | None
) -> ApprovalRequest:
    request = _ticket(ledger, ticket)
    if shown != fingerprint(request):
        raise Refused(
            409,
            f"ticket {ticket}'s arguments are not the ones your page showed: nothing was "
            "decided; reload the ticket and decide on what it shows now",
        )
    now = time.time()
    if request.state != "pending":
        raise Refused(409, _too_late(request, wanted, me, now))
    if request.expires_at <= now:
        raise Refused(
            409,
            f"ticket {ticket} expired {ago(request.expires_at, now)} ago: nothing was decided; "
            "the agent's next call opens a new ticket",
        )
    act = ledger.approve if wanted == "approved" else ledger.deny
    out = act(ticket, by=me, reason=reason, only_if_pending=True)
    if out.state != wanted or out.decided_by != me:
        raise Refused(409, _too_late(out, wanted, me, now))
    return out


def _too_late(request: ApprovalRequest, wanted: str, me: str, now: float) -> str:
    if request.decided_by == me and request.state in (wanted, "spent"):
        verb = "approved" if request.state in ("approved", "spent") else "denied"
        return f"you already {verb} ticket {request.ticket}"
    return f"{_settled_text(request, now)}: your decision was not recorded"


def _settled_text(request: ApprovalRequest, now: float) -> str:
    t, by = request.ticket, request.decided_by or "someone"
    why = f" ({request.reason})" if request.reason else ""
    if request.state == "approved":
        return f"ticket {t} was already approved by {by}{why}"
    if request.state == "denied":
        return f"ticket {t} was already denied by {by}{why}"
    if request.state == "spent":
        return f"ticket {t} was approved by {by}{why} and the action has run"
    if request.expires_at <= now:
        return f"ticket {t} expired {ago(request.expires_at, now)} ago without a decision"
    return f"ticket {t} is {request.state}"


def _ticket(ledger: Ledger, ticket: str) -> ApprovalRequest:
    found = ledger.approval(ticket)
    if found is None:
        raise Refused(
            404,
            f"there is no approval ticket {ticket!r} in this ledger: check the link, or see "
            "the inbox",
        )
    return found


def _notice(ledger: Ledger, ask: Ask) -> Html:
    decided = ask.query.get("decided")
    found = ledger.approval(decided) if decided else None
    if found is None or found.decided_by != ask.who.name:
        return Html()
    verb = "Approved" if found.state in ("approved", "spent") else "Denied"
    return h(
        '<p class="ok" role="status">{v} {tool} in run {run} (ticket {t}).</p>',
        v=verb,
        tool=found.tool,
        run=found.run_id,
        t=found.ticket,
    )


def _marked(body: Html, ids: str) -> Html:
    return h('<div id="live-list" data-ids="{ids}">{b}</div>', ids=ids, b=body)


def _card(
    ledger: Ledger,
    request: ApprovalRequest,
    ask: Ask,
    now: float,
    back: str,
    *,
    pick: bool = False,
    stale: bool = False,
    then_next: bool = False,
) -> Html:
    form = (
        join([_form(request, ask, back, then_next), _pick(request) if pick else Html()])
        if ask.who.can_decide
        else h('<p class="ro">Read-only: you see this ticket but cannot decide it.</p>')
    )
    return h(
        '<section class="ticket" id="{t}" tabindex="-1"><div class="what">{details}</div>'
        '<div class="decide">{form}</div></section>',
        t=request.ticket,
        details=_details(ledger, request, now, stale=stale),
        form=form,
    )


def _details(ledger: Ledger, request: ApprovalRequest, now: float, *, stale: bool) -> Html:
    # One read per ticket: the run's actions, this one among them once it has run (or failed).
    actions = ledger.effects(request.run_id, limit=SHOWN_ACTIONS * 5)
    # Tickets opened before schema version 8 did not record the kind or who asked; the kind is
    # then that of the action row, if it has run before (an earlier attempt).
    kinds = [r.kind for r in actions if r.key == request.key]
    kind = request.kind or (kinds[0] if kinds else NOT_RECORDED)
    masked = count_redacted(request.args)
    redacted = h(
        '<p class="redacted">{n} value(s) redacted: shown as ***, the tool gets the real '
        "value.</p>",
        n=masked,
    )
    return h(
        '<h2><code>{tool}</code> <span class="kind">{kind}</span>{mark}</h2>{why}'
        '<dl><dt>Run</dt><dd><a href="/run?id={run_q}">{run}</a></dd>'
        '<dt>Ticket</dt><dd><a href="/approvals/{t}"><code>{t}</code></a> (attempt {attempt})</dd>'
        '<dt>Asked by</dt><dd class="asked">{policy}</dd>'
        "<dt>Waiting</dt><dd>{waited} (asked {asked}, expires {expires})</dd></dl>"
        "<h3>Exact arguments, as they will run</h3>{args}{redacted}{changes}"
        "<h3>What this run already did</h3>{done}",
        tool=request.tool,
        kind=kind,
        mark=SUPERSEDED_MARK if stale else Html(),
        why=h(
            '<p class="superseded-note">This run has asked about {tool} again since this '
            "ticket: see its newer ticket in the comparison below before deciding this one.</p>",
            tool=request.tool,
        )
        if stale
        else Html(),
        run=request.run_id,
        run_q=_q(request.run_id),
        t=request.ticket,
        attempt=request.for_attempt,
        policy=request.asked_by or NOT_RECORDED,
        waited=ago(request.requested_at, now),
        asked=clock(request.requested_at),
        expires=clock(request.expires_at),
        args=json_block(request.args),
        redacted=redacted if masked else Html(),
        changes=changes(request, ledger.approvals(request.run_id)),
        done=finished_actions(actions),
    )


def finished_actions(records: list[EffectRecord]) -> Html:
    done = [r for r in records if r.state in ("succeeded", "failed")][-SHOWN_ACTIONS:]
    if not done:
        return h('<p class="empty">Nothing finished yet in this run.</p>')
    items = join(
        h(
            '<li><code>{tool}</code> {state}: <span class="result">{outcome}</span></li>',
            tool=r.tool,
            state="done" if r.state == "succeeded" else "failed (did not act)",
            outcome=(r.result_json or "(no result stored)")
            if r.state == "succeeded"
            else (r.error or ""),
        )
        for r in done
    )
    return h('<ul class="done">{items}</ul>', items=items)


def _form(request: ApprovalRequest, ask: Ask, back: str, then_next: bool) -> Html:
    return h(
        '<form method="post" action="/approvals/{t}">{csrf}{fp}{back}{then}'
        '<label>Reason <textarea name="reason" rows="2"></textarea></label>'
        '<button name="decision" value="approve" class="approve" aria-keyshortcuts="a">'
        "Approve</button> "
        '<button name="decision" value="deny" class="deny" aria-keyshortcuts="d">Deny</button>'
        '<p class="as">Recorded as {who}.</p></form>',
        t=request.ticket,
        csrf=hidden("csrf", ask.csrf),
        fp=hidden("fingerprint", fingerprint(request)),
        back=hidden("back", back),
        then=hidden("then", "next") if then_next else Html(),
        who=ask.who.name,
    )


def _tick(request: ApprovalRequest) -> Html:
    """A line's tick for the decision on ticked tickets, bound to the arguments it stands for."""
    return h(
        '<input type="checkbox" form="bulk" name="{n}" value="{fp}" '
        'aria-label="Tick {tool} in run {run}">',
        n=PICK + request.ticket,
        fp=fingerprint(request),
        tool=request.tool,
        run=request.run_id,
    )


def _pick(request: ApprovalRequest) -> Html:
    return h(
        '<label class="pick"><input type="checkbox" form="bulk" name="{n}" value="{fp}"> '
        "Tick for the decision on ticked tickets</label>",
        n=PICK + request.ticket,
        fp=fingerprint(request),
    )


def _q(value: str) -> str:
    from urllib.parse import quote

    return quote(value, safe="")


__all__ = ["bulk_decide", "decide", "esc", "finished_actions", "inbox", "ticket_page"]
