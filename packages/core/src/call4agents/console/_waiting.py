"""The inbox's list: which waiting tickets a person asked for (filters, search, order) and the
keyset links from one page of them to the next."""

from __future__ import annotations

from urllib.parse import urlencode

from call4agents import WaitingFilter
from call4agents.engine.approvals import ApprovalRequest
from call4agents.model.kinds import KINDS
from call4agents.storage.approval_rows import SORTS

from ._auth import Refused
from ._html import Html, h, join, options

SHOWN = 25  # tickets to a page, the oldest first unless sorted otherwise
FILTERS = ("tool", "run", "kind", "asked", "q", "waited", "sort")
WAITED = {"": None, "5m": 300.0, "1h": 3600.0, "24h": 86400.0}
SORT_WORDS = {"oldest": "oldest first", "newest": "newest first", "expiring": "expiring first"}


def where_of(query: dict[str, str]) -> WaitingFilter:
    text = {k: query.get(k, "").strip() or None for k in ("tool", "run", "kind", "asked", "q")}
    waited = query.get("waited", "")
    if waited not in WAITED:
        raise Refused(400, f"unknown wait {waited!r}: pick one of {', '.join(WAITED)}")
    sort = query.get("sort") or "oldest"
    if sort not in SORTS:
        raise Refused(400, f"unknown sort {sort!r}: pick one of {', '.join(SORTS)}")
    if text["kind"] is not None and text["kind"] not in KINDS:
        raise Refused(400, f"unknown kind {text['kind']!r}: pick one of {', '.join(KINDS)}")
    return WaitingFilter(
        tool=text["tool"],
        run_id=text["run"],
        kind=text["kind"],
        asked_by=text["asked"],
        search=text["q"],
        older_than=WAITED[waited],
        sort=sort,
    )


def filters(where: WaitingFilter) -> Html:
    waited = next(k for k, v in WAITED.items() if v == where.older_than)
    return h(
        '<form method="get" action="/" class="filters">'
        '<label>Tool <input name="tool" value="{tool}"></label>'
        '<label>Run id contains <input name="run" value="{run}"></label>'
        '<label>Kind <select name="kind">{kinds}</select></label>'
        '<label>Who asked contains <input name="asked" value="{asked}"></label>'
        '<label>Search <input name="q" type="search" value="{q}"></label>'
        '<label>Waiting longer than <select name="waited">{waits}</select></label>'
        '<label>Order <select name="sort">{sorts}</select></label>'
        "<button>Filter</button></form>",
        tool=where.tool or "",
        run=where.run_id or "",
        asked=where.asked_by or "",
        q=where.search or "",
        kinds=options({"": "any kind", **{k: k for k in KINDS}}, where.kind or ""),
        waits=options({w: w or "any time" for w in WAITED}, waited),
        sorts=options(SORT_WORDS, where.sort),
    )


def pages(
    query: dict[str, str], shown: list[ApprovalRequest], total: int, after: str | None
) -> Html:
    """Keyset links: the next page starts after this page's last ticket."""
    kept = {k: v for k, v in query.items() if k in FILTERS and v}
    links = []
    if after is not None:
        links.append(h('<a href="/?{q}">First page</a>', q=urlencode(kept)))
    if len(shown) == SHOWN and total > SHOWN:
        q = urlencode({**kept, "after": shown[-1].ticket})
        links.append(h('<a href="/?{q}" rel="next">Next {n}</a>', q=q, n=SHOWN))
    if not links:
        return Html()
    return h('<nav class="pages" aria-label="Pages">{l}</nav>', l=join(links))
