"""The audit: every decision and settlement, newest first, filtered, paged, exported."""

from __future__ import annotations

import time
from urllib.parse import urlencode

from starlette.responses import Response

from call4agents import AuditEntry, Ledger
from call4agents.model.errors import ConfigurationError
from call4agents.storage.audit_rows import ACTIONS, arguments, as_csv, as_records

from ._auth import Refused
from ._listing import address, kept, keyset_links, pick, run_address
from ._web import SECURITY_HEADERS, Ask, json_response, page

PAGE = 50
FILTERS = ("by", "action", "run", "tool", "since")
WITHIN = {"": None, "1h": 3600.0, "24h": 86400.0, "7d": 7 * 86400.0, "30d": 30 * 86400.0}
EXPORTED = 10_000  # one export's rows at most; page with before= for more
EXPORTS = (("csv", "CSV"), ("json", "JSON"))


def audit(ledger: Ledger, ask: Ask) -> Response:
    chosen = {name: ask.query.get(name, "").strip() for name in FILTERS}
    chosen["action"] = pick(ask.query, "action", ACTIONS)
    chosen["since"] = pick(ask.query, "since", WITHIN)
    within = WITHIN[chosen["since"]]
    export = pick(ask.query, "format", [f for f, _ in EXPORTS])
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
            return json_response(as_records(found, args))
        headers = {**SECURITY_HEADERS, "Content-Disposition": 'attachment; filename="audit.csv"'}
        return Response(as_csv(found, args), media_type="text/csv", headers=headers)
    return _page(ask, chosen, found)


def _page(ask: Ask, chosen: dict[str, str], found: list[AuditEntry]) -> Response:
    """The entries as a table, each run linked to its page (which leads back to this one), the
    filters kept by the export links and from one page to the next."""
    query = kept(chosen, FILTERS)
    before = ask.query.get("before", "")
    here = address("/audit", {**chosen, "before": before}, (*FILTERS, "before"))
    return page(
        "audit.html",
        ask.who,
        here="/audit",
        chosen=chosen,
        actions={a: a.replace("_", " ") or "any decision" for a in ("", *ACTIONS)},
        windows={w: f"last {w}" if w else "any time" for w in WITHIN},
        exports={t: f"/audit?{urlencode({**query, 'format': f})}" for f, t in EXPORTS},
        entries=[(e, run_address(e.run_id, here)) for e in found],
        pages=keyset_links(
            "/audit",
            query,
            after={"before": str(found[-1].id)} if len(found) >= PAGE else None,
            paged=bool(before),
        ),
    )


def _before(raw: str) -> int | None:
    if not raw:
        return None
    if not raw.isdigit():
        raise Refused(400, f"before={raw!r} is not an entry id")
    return int(raw)
