"""The in-doubt queue: what may or may not have happened, and settling it."""

from __future__ import annotations

import json
import time
from typing import Any

from starlette.responses import Response

from call4agents import EffectRecord, Ledger

from ._auth import Refused
from ._html import Html, ago, clock, h, hidden, join, json_block, page
from ._web import Ask, html, redirect

SHOWN = 100


def queue(ledger: Ledger, ask: Ask) -> Response:
    found = ledger.in_doubt()
    now = time.time()
    settled = ask.query.get("settled")
    notice = (
        h('<p class="ok" role="status">Settled action {k}.</p>', k=settled[:12])
        if settled
        else Html()
    )
    if not found:
        body = join([notice, h('<p class="empty">Nothing is in doubt.</p>')])
    else:
        cards = join(_card(r, ask, now) for r in found[:SHOWN])
        keys = h('<p class="keys"><kbd>j</kbd> and <kbd>k</kbd> go to the next and previous.</p>')
        body = join([notice, h("<p>{n} in doubt.</p>", n=len(found)), keys, cards])
    ids = ",".join(r.key for r in found[:SHOWN])
    marked = h('<div id="live-list" data-ids="{ids}">{b}</div>', ids=ids, b=body)
    return html(page("In doubt", ask.who.name, ask.who.role, marked, live=True, here="/doubt"))


def _card(record: EffectRecord, ask: Ask, now: float) -> Html:
    details = record.as_dict()
    evidence = join(
        h(
            "<li>attempt {a} ended {s} late: <code>{o}</code> (kept, not applied)</li>",
            a=e.get("attempt"),
            s=e.get("state"),
            o=json.dumps(e.get("result") or e.get("error"), default=str),
        )
        for e in record.evidence
    )
    form = (
        _form(record, ask)
        if ask.who.can_decide
        else h('<p class="ro">Read-only: you cannot settle it.</p>')
    )
    return h(
        '<section class="doubt" id="k{key12}" tabindex="-1"><div class="what">'
        '<h2><code>{tool}</code> <span class="kind">{kind}</span></h2>'
        '<dl><dt>Run</dt><dd><a href="/run?id={run_q}">{run}</a></dd>'
        "<dt>Why in doubt</dt><dd>{why}</dd>"
        "<dt>Attempts</dt><dd>{attempt}</dd>"
        "<dt>Lease holder</dt><dd>{lease}</dd>"
        "<dt>In doubt since</dt><dd>{since} ({ago} ago)</dd>"
        "<dt>Idempotency key</dt><dd><code>{ikey}</code>: look it up at the provider</dd>"
        "<dt>Action key</dt><dd><code>{key}</code></dd></dl>"
        "<h3>Arguments</h3>{args}{evidence}</div>"
        '<div class="decide">{form}</div></section>',
        key12=record.key[:12],
        tool=record.tool,
        kind=record.kind,
        run=record.run_id,
        run_q=_quote(record.run_id),
        why=record.note or record.error or "its attempt ended without a result",
        attempt=record.attempt,
        lease=_lease(details["owner"], record.lease_expires_at),
        since=clock(record.updated_at),
        ago=ago(record.updated_at, now),
        ikey=record.idempotency_key,
        key=record.key,
        args=json_block(record.args),
        evidence=h("<h3>Late evidence</h3><ul>{e}</ul>", e=evidence) if record.evidence else Html(),
        form=form,
    )


def _lease(owner: str | None, until: float | None) -> str:
    # A timeout or an orphaned attempt leaves no live lease; "until" with no time reads as a bug.
    if until is None:
        return f"{owner} (lease released)" if owner else "none (no worker holds it)"
    return f"{owner or 'unknown worker'} (lease until {clock(until)})"


def _form(record: EffectRecord, ask: Ask) -> Html:
    return h(
        '<form method="post" action="/doubt/{key}">{csrf}'
        "<fieldset><legend>What happened?</legend>"
        '<label><input type="radio" name="outcome" value="happened" required> It happened</label>'
        '<label><input type="radio" name="outcome" value="did_not_happen"> '
        "It did not happen</label>"
        "</fieldset>"
        '<label>Result (JSON, if it happened) <textarea name="result" rows="3" '
        'placeholder="{{&quot;id&quot;: &quot;msg-1&quot;}}"></textarea></label>'
        '<label>Note <input name="note" placeholder="how you found out"></label>'
        '<button class="settle">Settle</button><p class="as">Recorded as {who}.</p></form>',
        key=record.key,
        csrf=hidden("csrf", ask.csrf),
        who=ask.who.name,
    )


def settle(ledger: Ledger, ask: Ask) -> Response:
    key = ask.path["key"]
    record = ledger.find(key)
    if record is None:
        raise Refused(404, f"there is no action with key {key!r} in this ledger")
    outcome = ask.form.get("outcome")
    if outcome not in ("happened", "did_not_happen"):
        raise Refused(400, "say whether it happened or not: nothing was recorded")
    if record.state != "in_doubt":
        by = f" by {record.resolved_by}" if record.resolved_by else ""
        raise Refused(
            409,
            f"{record.tool} in run {record.run_id} is no longer in doubt (it is "
            f"{record.state}{by}): nothing was recorded",
        )
    happened = outcome == "happened"
    result = _result(ask.form.get("result", "")) if happened else None
    note = ask.form.get("note", "").strip()
    ledger.resolve(key, happened=happened, result=result, by=ask.who.name, note=note)
    return redirect(f"/doubt?settled={key}")


def _result(text: str) -> Any:
    if not text.strip():
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise Refused(
            400,
            f"the result is not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno}): "
            "nothing was recorded; go back and correct it",
        ) from exc


def _quote(value: str) -> str:
    from urllib.parse import quote

    return quote(value, safe="")
