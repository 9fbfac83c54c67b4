"""The inbox's list: which waiting tickets a person asked for (filters, search, order)."""

from __future__ import annotations

from call4agents import WaitingFilter
from call4agents.model.kinds import KINDS
from call4agents.storage.approval_rows import SORTS

from ._listing import AGE_WORDS, age_name, age_of, in_use, kept, pick

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
