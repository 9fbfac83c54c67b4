"""The inbox's list: which waiting tickets a person asked for (filters, search, order) and the
keyset links from one page of them to the next."""

from __future__ import annotations

from call4agents import WaitingFilter
from call4agents.engine.approvals import ApprovalRequest
from call4agents.model.kinds import KINDS
from call4agents.storage.approval_rows import SORTS

from ._listing import AGE_WORDS, Pages, age_name, age_of, in_use, kept, keyset_links, pick

SHOWN = 25  # tickets to a page, the oldest first unless sorted otherwise
FILTERS = ("tool", "run", "kind", "asked", "q", "waited", "sort")
SORT_WORDS = {"oldest": "oldest first", "newest": "newest first", "expiring": "expiring first"}


def where_of(query: dict[str, str]) -> WaitingFilter:
    text = {k: query.get(k, "").strip() or None for k in ("tool", "run", "asked", "q")}
    return WaitingFilter(
        tool=text["tool"],
        run_id=text["run"],
        kind=pick(query, "kind", KINDS) or None,
        asked_by=text["asked"],
        search=text["q"],
        older_than=age_of(query, "waited", "wait"),
        sort=pick(query, "sort", SORTS, default="oldest"),
    )


def filters(where: WaitingFilter, query: dict[str, str]) -> dict[str, object]:
    """What the inbox's folded filter form shows (``_ticket_filters.html``)."""
    return {
        "where": where,
        "kinds": {"": "any kind", **{k: k for k in KINDS}},
        "waits": AGE_WORDS,
        "waited": age_name(where.older_than),
        "sorts": SORT_WORDS,
        "view": query.get("view") or "",
        "said": in_use(kept(query, FILTERS)),
    }


def pages(
    query: dict[str, str], shown: list[ApprovalRequest], total: int, after: str | None
) -> Pages:
    """Keyset links: the next page starts after this page's last ticket."""
    more = len(shown) == SHOWN and total > SHOWN
    return keyset_links(
        "/",
        kept(query, (*FILTERS, "view")),
        after={"after": shown[-1].ticket} if more else None,
        paged=after is not None,
    )
