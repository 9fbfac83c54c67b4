"""The approvals inbox: what each pending ticket will run, what its run already did, decide."""

from __future__ import annotations

import time

from starlette.responses import Response

from call4agents import EffectRecord, Ledger
from call4agents.controls import stats
from call4agents.engine.approvals import ApprovalRequest

from ._auth import Refused
from ._changes import changes
from ._html import Html, ago, clock, count_redacted, esc, h, hidden, join, json_block, page
from ._web import Ask, fingerprint, html, redirect

SHOWN_TICKETS = 25  # the oldest first; the count says how many more wait
SHOWN_ACTIONS = 20  # of the run's finished actions beside a ticket
DECISIONS = {"approve": "approved", "deny": "denied"}
NOT_RECORDED = "not recorded (a ticket opened before the ledger kept it)"
KEYS = Html(
    '<p class="keys">Keys: <kbd>j</kbd> and <kbd>k</kbd> go to the next and previous ticket; '
    "<kbd>a</kbd> approves it, <kbd>d</kbd> denies it, each after you confirm.</p>"
)


def inbox(ledger: Ledger, ask: Ask) -> Response:
    live = ledger.waiting(limit=SHOWN_TICKETS)
    total = stats.open_figures(ledger).approvals_waiting
    now = time.time()
    notice = _notice(ledger, ask)
    if not live:
        body = h('{n}<p class="empty">No approvals waiting.</p>', n=notice)
    else:
        more = total - len(live)
        cards = join(_card(ledger, r, ask, now) for r in live)
        tail = h('<p class="more">{n} more waiting (oldest shown first).</p>', n=more)
        body = join(
            [
                notice,
                h("<p>{n} waiting.</p>", n=max(total, len(live))),
                KEYS if ask.who.can_decide else Html(),
                cards,
                tail if more > 0 else Html(),
            ]
        )
    ids = ",".join(r.ticket for r in live)
    return html(
        page("Approvals", ask.who.name, ask.who.role, _marked(body, ids), live=True, here="/")
    )


def ticket_page(ledger: Ledger, ask: Ask) -> Response:
    request = _ticket(ledger, ask.path["ticket"])
    now = time.time()
    if request.state == "pending" and request.expires_at > now:
        body = _card(ledger, request, ask, now)
    else:
        body = join(
            [
                h('<p class="state">{s}</p>', s=_settled_text(request, now)),
                _details(ledger, request, now),
            ]
        )
    return html(page(f"Ticket {request.ticket}", ask.who.name, ask.who.role, body))


def decide(ledger: Ledger, ask: Ask) -> Response:
    """One decision, refused unless the page showed this ticket, these arguments, still open."""
    ticket = ask.path["ticket"]
    wanted = DECISIONS.get(ask.form.get("decision", ""))
    if wanted is None:
        raise Refused(400, "say approve or deny: nothing was decided")
    request = _ticket(ledger, ticket)
    if ask.form.get("fingerprint") != fingerprint(request):
        raise Refused(
            409,
            f"ticket {ticket}'s arguments are not the ones your page showed: nothing was "
            "decided; reload the ticket and decide on what it shows now",
        )
    now = time.time()
    if request.state != "pending":
        raise Refused(409, _too_late(request, wanted, ask.who.name, now))
    if request.expires_at <= now:
        raise Refused(
            409,
            f"ticket {ticket} expired {ago(request.expires_at, now)} ago: nothing was decided; "
            "the agent's next call opens a new ticket",
        )
    act = ledger.approve if wanted == "approved" else ledger.deny
    reason = ask.form.get("reason", "").strip() or None
    out = act(ticket, by=ask.who.name, reason=reason, only_if_pending=True)
    if out.state != wanted or out.decided_by != ask.who.name:
        raise Refused(409, _too_late(out, wanted, ask.who.name, now))
    return redirect(f"/?decided={ticket}")


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


def _card(ledger: Ledger, request: ApprovalRequest, ask: Ask, now: float) -> Html:
    form = (
        _form(request, ask)
        if ask.who.can_decide
        else h('<p class="ro">Read-only: you see this ticket but cannot decide it.</p>')
    )
    return h(
        '<section class="ticket" id="{t}" tabindex="-1"><div class="what">{details}</div>'
        '<div class="decide">{form}</div></section>',
        t=request.ticket,
        details=_details(ledger, request, now),
        form=form,
    )


def _details(ledger: Ledger, request: ApprovalRequest, now: float) -> Html:
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
        '<h2><code>{tool}</code> <span class="kind">{kind}</span></h2>'
        '<dl><dt>Run</dt><dd><a href="/run?id={run_q}">{run}</a></dd>'
        '<dt>Ticket</dt><dd><a href="/approvals/{t}"><code>{t}</code></a> (attempt {attempt})</dd>'
        '<dt>Asked by</dt><dd class="asked">{policy}</dd>'
        "<dt>Waiting</dt><dd>{waited} (asked {asked}, expires {expires})</dd></dl>"
        "<h3>Exact arguments, as they will run</h3>{args}{redacted}{changes}"
        "<h3>What this run already did</h3>{done}",
        tool=request.tool,
        kind=kind,
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


def _form(request: ApprovalRequest, ask: Ask) -> Html:
    return h(
        '<form method="post" action="/approvals/{t}">{csrf}{fp}'
        '<label>Reason <textarea name="reason" rows="2"></textarea></label>'
        '<button name="decision" value="approve" class="approve" aria-keyshortcuts="a">'
        "Approve</button> "
        '<button name="decision" value="deny" class="deny" aria-keyshortcuts="d">Deny</button>'
        '<p class="as">Recorded as {who}.</p></form>',
        t=request.ticket,
        csrf=hidden("csrf", ask.csrf),
        fp=hidden("fingerprint", fingerprint(request)),
        who=ask.who.name,
    )


def _q(value: str) -> str:
    from urllib.parse import quote

    return quote(value, safe="")


__all__ = ["decide", "esc", "finished_actions", "inbox", "ticket_page"]
