"""The inbox's list: which waiting tickets a person asked for (filters, search, order) and the
keyset links from one page of them to the next."""

from __future__ import annotations

from call4agents import WaitingFilter
from call4agents.engine.approvals import ApprovalRequest
from call4agents.model.kinds import KINDS
from call4agents.storage.approval_rows import SORTS

from ._auth import Refused
from ._html import Html, h, hidden, options
from ._listing import AGE_WORDS, age_name, age_of, folded, kept, keyset_links

SHOWN = 25  # tickets to a page, the oldest first unless sorted otherwise
FILTERS = ("tool", "run", "kind", "asked", "q", "waited", "sort")
SORT_WORDS = {"oldest": "oldest first", "newest": "newest first", "expiring": "expiring first"}


def where_of(query: dict[str, str]) -> WaitingFilter:
    text = {k: query.get(k, "").strip() or None for k in ("tool", "run", "kind", "asked", "q")}
    waited = age_of(query, "waited", "wait")
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
        older_than=waited,
        sort=sort,
    )


def filters(where: WaitingFilter, query: dict[str, str]) -> Html:
    fields = h(
        '<label>Tool <input name="tool" value="{tool}"></label>'
        '<label>Run id contains <input name="run" value="{run}"></label>'
        '<label>Kind <select name="kind">{kinds}</select></label>'
        '<label>Who asked contains <input name="asked" value="{asked}"></label>'
        '<label>Search <input name="q" type="search" value="{q}"></label>'
        '<label>Waiting longer than <select name="waited">{waits}</select></label>'
        '<label>Order <select name="sort">{sorts}</select></label>{view}',
        tool=where.tool or "",
        run=where.run_id or "",
        asked=where.asked_by or "",
        q=where.search or "",
        kinds=options({"": "any kind", **{k: k for k in KINDS}}, where.kind or ""),
        waits=options(AGE_WORDS, age_name(where.older_than)),
        sorts=options(SORT_WORDS, where.sort),
        view=hidden("view", query["view"]) if query.get("view") else Html(),
    )
    return folded("/", fields, kept(query, FILTERS))


def pages(
    query: dict[str, str], shown: list[ApprovalRequest], total: int, after: str | None
) -> Html:
    """Keyset links: the next page starts after this page's last ticket."""
    return keyset_links(
        "/",
        kept(query, (*FILTERS, "view")),
        last=shown[-1].ticket if shown else None,
        more=len(shown) == SHOWN and total > SHOWN,
        paged=after is not None,
        size=SHOWN,
    )
