"""The in-doubt queue: what may or may not have happened, and settling it."""

from __future__ import annotations

import json
import time
from typing import Any
from urllib.parse import urlencode

from starlette.responses import Response

from call4agents import DoubtFilter, EffectRecord, Ledger

from ._auth import Refused
from ._html import Html, ago, clock, h, hidden, join, json_block, options, page
from ._listing import (
    AGE_WORDS,
    age_name,
    age_of,
    folded,
    kept,
    keyset_links,
    local_address,
    with_param,
)
from ._web import Ask, html, redirect

SHOWN = 25  # actions to a page, those in doubt longest first
FILTERS = ("tool", "run", "why", "age")


def where_of(query: dict[str, str]) -> DoubtFilter:
    text = {k: query.get(k, "").strip() or None for k in ("tool", "run", "why")}
    return DoubtFilter(
        tool=text["tool"],
        run_id=text["run"],
        reason=text["why"],
        older_than=age_of(query, "age", "age"),
    )


def queue(ledger: Ledger, ask: Ask) -> Response:
    where, after = where_of(ask.query), ask.query.get("after") or None
    found, total = ledger.in_doubt_page(where, after=after, limit=SHOWN)
    filtered = where != DoubtFilter() or after is not None
    now = time.time()
    back = _address(ask.query)
    notice = settled_notice(ledger, ask)
    if not found:
        empty = "Nothing in doubt matches." if filtered else "Nothing is in doubt."
        body = join([notice, _filters(where, ask.query), h('<p class="empty">{e}</p>', e=empty)])
    else:
        keys = h('<p class="keys"><kbd>j</kbd> and <kbd>k</kbd> go to the next and previous.</p>')
        body = join(
            [
                notice,
                _filters(where, ask.query),
                h("<p>{n} in doubt{m}.</p>", n=total, m=" match" if filtered else ""),
                keys,
                join(card(r, ask, now, back) for r in found),
                keyset_links(
                    "/doubt",
                    kept(ask.query, FILTERS),
                    last=found[-1].key,
                    more=len(found) == SHOWN and total > SHOWN,
                    paged=after is not None,
                    size=SHOWN,
                ),
            ]
        )
    ids = ",".join(r.key for r in found)
    marked = h('<div id="live-list" data-ids="{ids}">{b}</div>', ids=ids, b=body)
    # Live updates only on the first page unfiltered, as in the inbox.
    return html(
        page("In doubt", ask.who.name, ask.who.role, marked, live=not filtered, here="/doubt")
    )


def _filters(where: DoubtFilter, query: dict[str, str]) -> Html:
    fields = h(
        '<label>Tool <input name="tool" value="{tool}"></label>'
        '<label>Run id contains <input name="run" value="{run}"></label>'
        '<label>Why in doubt contains <input name="why" value="{why}"></label>'
        '<label>In doubt longer than <select name="age">{ages}</select></label>',
        tool=where.tool or "",
        run=where.run_id or "",
        why=where.reason or "",
        ages=options(AGE_WORDS, age_name(where.older_than)),
    )
    return folded("/doubt", fields, kept(query, FILTERS))


def _address(query: dict[str, str]) -> str:
    """This page of the queue, to come back to after settling one of its actions."""
    filters = kept(query, (*FILTERS, "after"))
    return "/doubt" + (f"?{urlencode(filters)}" if filters else "")


def settled_notice(ledger: Ledger, ask: Ask) -> Html:
    """What the person just settled, on the page the settling returned to."""
    settled = ask.query.get("settled")
    found = ledger.find(settled) if settled else None
    if found is None or found.resolved_by != ask.who.name:
        return Html()
    said = "it happened" if found.state == "succeeded" else "it did not happen"
    return h(
        '<p class="ok" role="status">Settled {tool} in run {run}: {said}.</p>',
        tool=found.tool,
        run=found.run_id,
        said=said,
    )


def card(record: EffectRecord, ask: Ask, now: float, back: str) -> Html:
    """One action in doubt with what is known of it, and (for a person who may decide) the
    form that settles it; ``back``: the page to return to once it is settled."""
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
        _form(record, ask, back)
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


def _form(record: EffectRecord, ask: Ask, back: str) -> Html:
    return h(
        '<form method="post" action="/doubt/{key}">{csrf}{back}'
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
        back=hidden("back", back),
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
    back = local_address(ask.form.get("back"), "/doubt")
    return redirect(with_param(back, "settled", key))


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
