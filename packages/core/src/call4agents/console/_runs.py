"""Runs: a filterable list, one run's page with its actions, ending and hand-off, and undo."""

from __future__ import annotations

import time
from collections import Counter
from urllib.parse import quote, urlencode

from starlette.responses import Response

from call4agents import AuditEntry, EffectRecord, Ledger, RunSummary
from call4agents.engine.approvals import ApprovalRequest
from call4agents.engine.budgets import spending_text
from call4agents.engine.undos import undo_for
from call4agents.storage import run_controls

from ._auth import Refused
from ._doubt import card, settled_notice
from ._html import Html, ago, clock, h, hidden, join, json_block, options, page, table
from ._web import Ask, html

STATES = (
    "in_doubt",
    "running",
    "waiting_approval",
    "has_failures",
    "done",
    "escalated",
    "undone",
    "partly_undone",
)
LISTED = 100  # runs to a page
# How recently a listed run was active; counting every run ever recorded is slow on a large ledger.
WINDOWS = {"1h": 3600.0, "24h": 86400.0, "7d": 604800.0, "all": None}
DEFAULT_WINDOW = "7d"
SETTLEMENTS_READ = 1000
STATE_WORDS = {
    "succeeded": "done",
    "failed": "failed",
    "in_doubt": "in doubt",
    "started": "running",
}


def runs_list(ledger: Ledger, ask: Ask) -> Response:
    state, tool, text = (ask.query.get(k, "").strip() for k in ("state", "tool", "q"))
    window = ask.query.get("active", DEFAULT_WINDOW)
    if state and state not in STATES:
        raise Refused(400, f"unknown state {state!r}: pick one of {', '.join(STATES)}")
    if window not in WINDOWS:
        raise Refused(400, f"unknown window {window!r}: pick one of {', '.join(WINDOWS)}")
    before = _cursor(ask.query)
    ledger.sweep()  # a dead worker's action shows as in doubt, not running
    found = ledger.runs(
        limit=LISTED,
        tool=tool or None,
        search=text or None,
        active_within=WINDOWS[window],
        before=before,
    )
    full = len(found) == LISTED
    found = _with_waiting_runs(ledger, found, tool, text, WINDOWS[window], before)
    waiting = Counter(ledger.waiting_by_run([r.run_id for r in found]))
    # One read of the listed runs' endings, not one per run.
    endings = run_controls.statuses_of(ledger.store, [r.run_id for r in found])
    rows = []
    now = time.time()
    for r in found:
        ending = endings.get(r.run_id)
        derived = ending or _state(r, waiting[r.run_id])
        if state and derived != state:
            continue
        link = h('<a href="/run?id={q}">{run}</a>', q=quote(r.run_id, safe=""), run=r.run_id)
        rows.append(
            [
                link,
                derived.replace("_", " "),
                r.actions,
                r.succeeded,
                r.failed,
                r.in_doubt,
                waiting[r.run_id],
                ago(r.last_at, now) + " ago",
            ]
        )
    body = join(
        [
            _filters(state, tool, text, window),
            table(
                ["Run", "State", "Actions", "Done", "Failed", "In doubt", "Waiting", "Last active"],
                rows,
                "runs",
            )
            if rows
            else h('<p class="empty">No runs match.</p>'),
            _pages(ask.query, found[-1] if full and found else None, before is not None),
        ]
    )
    return html(page("Runs", ask.who.name, ask.who.role, body, here="/runs"))


def _cursor(query: dict[str, str]) -> tuple[float, str] | None:
    at, run = query.get("before_at"), query.get("before_run")
    if at is None and run is None:
        return None
    try:
        return float(at or ""), run or ""
    except ValueError:
        raise Refused(
            400, f"before_at={at!r} is not a time: follow the Next link, or start at /runs"
        ) from None


def _pages(query: dict[str, str], last: RunSummary | None, paged: bool) -> Html:
    """Keyset links: the next page starts after the last run of this one (its last active time,
    then its id), so a page is as fast at the thousandth run as at the first."""
    kept = {k: v for k, v in query.items() if k in ("state", "tool", "q", "active") and v}
    links = [h('<a href="/runs?{q}">First page</a>', q=urlencode(kept))] if paged else []
    if last is not None:
        q = urlencode({**kept, "before_at": repr(last.last_at), "before_run": last.run_id})
        links.append(h('<a href="/runs?{q}" rel="next">Older runs</a>', q=q))
    return h('<nav class="pages" aria-label="Pages">{l}</nav>', l=join(links)) if links else Html()


def _with_waiting_runs(
    ledger: Ledger,
    found: list[RunSummary],
    tool: str,
    text: str,
    within: float | None,
    before: tuple[float, str] | None,
) -> list[RunSummary]:
    """The runs with actions, and those whose only record is a ticket waiting for a person (an
    agent stopped at its first tool call): the newest waiting tickets, filtered as the list is."""
    known = {r.run_id for r in found}
    cutoff = None if within is None else time.time() - within
    asked: dict[str, list[float]] = {}
    for t in ledger.waiting(limit=LISTED, newest_first=True):
        if t.run_id in known or (tool and t.tool != tool) or (text and text not in t.run_id):
            continue
        if cutoff is None or t.requested_at >= cutoff:
            asked.setdefault(t.run_id, []).append(t.requested_at)
    extra = [RunSummary(run, 0, 0, 0, 0, 0, min(at), max(at)) for run, at in asked.items()]
    if before is not None:
        extra = [r for r in extra if (r.last_at, r.run_id) < before]
    merged = sorted(found + extra, key=lambda r: (r.last_at, r.run_id), reverse=True)
    # A page of runs with actions decides where the next page starts; runs that only wait
    # for a person fill in among them, and all of the rest on the last page.
    if len(found) == LISTED:
        merged = [
            r for r in merged if (r.last_at, r.run_id) >= (found[-1].last_at, found[-1].run_id)
        ]
    return merged


def _state(r: RunSummary, waiting: int) -> str:
    if r.in_doubt:
        return "in_doubt"
    if r.started:
        return "running"
    if waiting:
        return "waiting_approval"
    return "has_failures" if r.failed else "done"


def _filters(state: str, tool: str, text: str, window: str) -> Html:
    states = {s: s.replace("_", " ") or "any state" for s in ("", *STATES)}
    return h(
        '<form method="get" action="/runs" class="filters">'
        '<label>State <select name="state">{states}</select></label>'
        '<label>Tool <input name="tool" value="{tool}"></label>'
        '<label>Run id contains <input name="q" value="{text}"></label>'
        '<label>Active in the last <select name="active">{windows}</select></label>'
        "<button>Filter</button></form>",
        states=options(states, state),
        windows=options({w: w for w in WINDOWS}, window),
        tool=tool,
        text=text,
    )


def run_page(ledger: Ledger, ask: Ask) -> Response:
    run_id = ask.query.get("id", "")
    ledger.sweep()
    actions = ledger.effects(run_id)
    settled = _settlements(ledger, run_id)
    tickets = ledger.approvals(run_id)
    status = ledger.run_status(run_id)
    if not (actions or tickets or status):
        raise Refused(
            404,
            f"there is no run {run_id!r} in this ledger (no actions, approvals or ending): "
            "see the runs list",
        )
    handoff = ledger.handoff(run_id) if status is not None else None
    spent = spending_text(ledger, run_id)
    parts = [
        settled_notice(ledger, ask),
        h("<h2>Actions, in order</h2>"),
        _actions(actions, settled),
        _in_doubt(actions, run_id, ask),
        h("<h2>Approvals</h2>"),
        _tickets(tickets) if tickets else h('<p class="empty">None asked.</p>'),
        h("<h2>Budget</h2><p>{s}</p>", s=spent or "No budget recorded for this run."),
        h("<h2>Ending</h2>"),
        _ending(status.status, status.reason, status.updated_at)
        if status
        else h("<p>No run control ended it (still going, or ended by the agent).</p>"),
    ]
    if handoff is not None:
        parts.append(
            h('<h2>Escalation hand-off</h2><pre class="handoff">{t}</pre>', t=handoff.text())
        )
    parts.append(_undo_part(actions, run_id, ask))
    return html(page(f"Run {run_id}", ask.who.name, ask.who.role, join(parts)))


def _in_doubt(actions: list[EffectRecord], run_id: str, ask: Ask) -> Html:
    """The run's own actions in doubt, each with the form the in-doubt queue shows: an
    escalated run's hand-off names them, and here they are settled."""
    doubt = [r for r in actions if r.state == "in_doubt"]
    if not doubt:
        return Html()
    now, back = time.time(), f"/run?id={quote(run_id, safe='')}"
    return join(
        [
            h("<h2>In doubt: {n} to settle</h2>", n=len(doubt)),
            join(card(r, ask, now, back) for r in doubt),
        ]
    )


def _settlements(ledger: Ledger, run_id: str) -> dict[str, AuditEntry]:
    """Each action's latest settlement by a person or a reconciler, from the audit: the action's
    own row forgets it once a retry after "did not happen" succeeds; the audit does not."""
    latest: dict[str, AuditEntry] = {}
    for entry in ledger.audit(run_id=run_id, limit=SETTLEMENTS_READ):  # newest first
        if entry.action in ("happened", "did_not_happen"):
            latest.setdefault(entry.key, entry)
    return latest


def _settled_text(r: EffectRecord, entry: AuditEntry | None) -> str:
    if entry is None:
        return (r.note or r.resolved_by or "") if r.resolved_by else ""
    said = "it happened" if entry.action == "happened" else "it did not happen"
    reason = f": {entry.reason}" if entry.reason else ""
    return f"attempt {entry.attempt}: {said}, said {entry.actor} at {clock(entry.at)}{reason}"


def _took(r: EffectRecord, entry: AuditEntry | None) -> str:
    # The ledger keeps when the first attempt began, not each attempt: after a settlement the
    # span from the first attempt to the end is mostly time in doubt, not the tool's, so none is
    # shown. A settled "it happened" never ran to its end here, so it has no time either.
    if r.state not in ("succeeded", "failed") or r.resolved_by or entry is not None:
        return ""
    took = f"{max(0.0, r.updated_at - r.created_at):.3f}s"
    return took if r.attempt == 1 else f"{took} over {r.attempt} attempts"


def _actions(actions: list[EffectRecord], settled: dict[str, AuditEntry]) -> Html:
    if not actions:
        return h('<p class="empty">No actions.</p>')
    rows = []
    for i, r in enumerate(actions, 1):
        outcome = r.result_json if r.state == "succeeded" else (r.error or r.note or "")
        if r.pruned_at is not None:
            outcome = "(result pruned by gc)"
        entry = settled.get(r.key)
        rows.append(
            [
                i,
                h("<code>{t}</code>", t=r.tool),
                r.kind,
                STATE_WORDS.get(r.state, r.state),
                r.attempt,
                json_block(r.args),
                h('<span class="result">{o}</span>', o=outcome or ""),
                _settled_text(r, entry),
                _took(r, entry),
            ]
        )
    return table(
        [
            "#",
            "Tool",
            "Kind",
            "State",
            "Attempts",
            "Arguments",
            "Result or error",
            "Settled",
            "Took",
        ],
        rows,
        "actions",
    )


def _tickets(tickets: list[ApprovalRequest]) -> Html:
    rows = [
        [
            h('<a href="/approvals/{t}"><code>{t}</code></a>', t=a.ticket),
            a.tool,
            a.state,
            a.decided_by or "",
            a.reason or "",
            clock(a.requested_at),
        ]
        for a in tickets
    ]
    return table(["Ticket", "Tool", "State", "Decided by", "Reason", "Asked"], rows)


def _ending(status: str, reason: str | None, at: float) -> Html:
    return h(
        "<p><b>{s}</b>: {r} ({at})</p>",
        s=status.replace("_", " "),
        r=reason or "no reason given",
        at=clock(at),
    )


def _undoable(actions: list[EffectRecord]) -> list[EffectRecord]:
    return [r for r in actions if r.state == "succeeded" and undo_for(r.tool) is not None]


def _undo_part(actions: list[EffectRecord], run_id: str, ask: Ask) -> Html:
    done = [r for r in actions if r.state == "succeeded" and r.kind != "undo"]
    undoable = _undoable(actions)
    if not done:
        return Html()
    if not undoable:
        return h(
            "<h2>Undo</h2><p>None of this run's tools declared <code>undo=</code> in this "
            "console (start it with <code>--import MODULE</code> to load them).</p>"
        )
    if not ask.who.can_decide:
        return h('<h2>Undo</h2><p class="ro">Read-only: you cannot undo this run.</p>')
    return h(
        "<h2>Undo</h2><p>{n} action(s) can be reversed.</p>"
        '<a class="button" href="/run/undo?id={q}">Undo this run...</a>',
        n=len(undoable),
        q=quote(run_id, safe=""),
    )


def undo_confirm(ledger: Ledger, ask: Ask) -> Response:
    run_id = ask.query.get("id", "")
    undoable = _undoable(ledger.effects(run_id))
    if not undoable:
        raise Refused(404, f"run {run_id!r} has nothing this console can undo")
    listed = join(
        h("<li><code>{t}</code> {a}</li>", t=r.tool, a=r.result_json or "")
        for r in reversed(undoable)
    )
    body = h(
        "<p>These will be reversed, newest first, each once only:</p><ul>{listed}</ul>"
        '<form method="post" action="/run/undo">{csrf}{run}'
        '<button class="deny">Yes, undo run {r}</button> <a href="/run?id={q}">Cancel</a></form>',
        listed=listed,
        csrf=hidden("csrf", ask.csrf),
        run=hidden("id", run_id),
        r=run_id,
        q=quote(run_id, safe=""),
    )
    return html(page(f"Undo run {run_id}?", ask.who.name, ask.who.role, body))


def undo(ledger: Ledger, ask: Ask) -> Response:
    run_id = ask.form.get("id", "")
    if not _undoable(ledger.effects(run_id)):
        raise Refused(404, f"run {run_id!r} has nothing this console can undo")
    report = ledger.undo(run_id)
    body = h(
        '<pre class="report">{t}</pre><p><a href="/run?id={q}">Back to the run</a></p>',
        t=report.text(),
        q=quote(run_id, safe=""),
    )
    return html(page(f"Undo of run {run_id}", ask.who.name, ask.who.role, body))
