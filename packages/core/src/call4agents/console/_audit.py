"""The audit: every decision and settlement, newest first, filtered, paged, exported."""

from __future__ import annotations

import json
import time
from urllib.parse import urlencode

from starlette.responses import Response

from call4agents import AuditEntry, Ledger
from call4agents.model.errors import ConfigurationError
from call4agents.storage.audit_rows import ACTIONS, arguments, as_csv

from ._auth import Refused, shown_name
from ._html import Html, clock, h, join, options, page, table
from ._web import SECURITY_HEADERS, Ask, html, json_response

PAGE = 50
FILTERS = ("by", "action", "run", "tool", "since")
WITHIN = {"": None, "1h": 3600.0, "24h": 86400.0, "7d": 7 * 86400.0, "30d": 30 * 86400.0}
EXPORTED = 10_000  # one export's rows at most; page with before= for more


def audit(ledger: Ledger, ask: Ask) -> Response:
    chosen = {name: ask.query.get(name, "").strip() for name in FILTERS}
    if chosen["action"] and chosen["action"] not in ACTIONS:
        raise Refused(400, f"unknown action {chosen['action']!r}: pick one of {', '.join(ACTIONS)}")
    if chosen["since"] not in WITHIN:
        raise Refused(400, f"unknown since {chosen['since']!r}: pick one of {', '.join(WITHIN)}")
    within = WITHIN[chosen["since"]]
    export = ask.query.get("format", "")
    if export not in ("", "csv", "json"):
        raise Refused(400, "format is csv or json")
    try:
        found = ledger.audit(
            by=chosen["by"] or None,
            action=chosen["action"] or None,
            run_id=chosen["run"] or None,
            tool=chosen["tool"] or None,
            since=None if within is None else time.time() - within,
            before=_before(ask.query.get("before", "")),
            limit=EXPORTED if export else PAGE,
        )
    except ConfigurationError as exc:  # a before= naming no entry
        raise Refused(400, str(exc)) from exc
    if export:  # with the arguments decided on, redacted as the card showed them
        args = arguments(ledger.store, found)
        if export == "json":
            return json_response([_exported(e, args.get(e.id)) for e in found])
        headers = {**SECURITY_HEADERS, "Content-Disposition": 'attachment; filename="audit.csv"'}
        return Response(as_csv(found, args), media_type="text/csv", headers=headers)
    query = {k: v for k, v in chosen.items() if v}
    body = join([_filters(chosen), _exports(query), _entries(found), _next(found, query)])
    return html(page("Audit", ask.who.name, ask.who.role, body, here="/audit"))


def _exported(entry: AuditEntry, args: str | None) -> dict[str, object]:
    return {**entry.as_dict(), "args": None if args is None else json.loads(args)}


def _before(raw: str) -> int | None:
    if not raw:
        return None
    if not raw.isdigit():
        raise Refused(400, f"before={raw!r} is not an entry id")
    return int(raw)


def _filters(chosen: dict[str, str]) -> Html:
    actions = {a: a.replace("_", " ") or "any decision" for a in ("", *ACTIONS)}
    return h(
        '<form method="get" action="/audit" class="filters">'
        '<label>Who <input name="by" value="{by}"></label>'
        '<label>What <select name="action">{actions}</select></label>'
        '<label>Run <input name="run" value="{run}"></label>'
        '<label>Tool <input name="tool" value="{tool}"></label>'
        '<label>When <select name="since">{since}</select></label>'
        "<button>Filter</button></form>",
        actions=options(actions, chosen["action"]),
        since=options({w: f"last {w}" if w else "any time" for w in WITHIN}, chosen["since"]),
        **{k: chosen[k] for k in ("by", "run", "tool")},
    )


def _exports(query: dict[str, str]) -> Html:
    links = join(
        h('<a href="/audit?{q}">{t}</a>', q=urlencode({**query, "format": f}), t=t)
        for f, t in (("csv", "CSV"), ("json", "JSON"))
    )
    return h('<p class="note">Export what this filter selects: {l}</p>', l=links)


def _entries(found: list[AuditEntry]) -> Html:
    if not found:
        return h('<p class="empty">No decisions or settlements recorded that match.</p>')
    rows: list[list[object]] = [
        [
            clock(e.at),
            shown_name(e.actor),
            e.action.replace("_", " "),
            h('<a href="/run?{q}">{r}</a>', q=urlencode({"id": e.run_id}), r=e.run_id),
            h("<code>{t}</code>", t=e.tool),
            e.ticket or h("<code>{k}</code> attempt {a}", k=e.key[:12], a=e.attempt),
            e.reason or "",
        ]
        for e in found
    ]
    headers = ["When", "Who", "What", "Run", "Tool", "Ticket or action", "Reason"]
    return table(headers, rows, "audit")


def _next(found: list[AuditEntry], query: dict[str, str]) -> Html:
    if len(found) < PAGE:
        return Html()
    after = urlencode({**query, "before": found[-1].id})
    return h('<p><a href="/audit?{q}" rel="next">Older entries</a></p>', q=after)
