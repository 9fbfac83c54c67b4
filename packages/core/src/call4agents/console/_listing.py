"""What every long list of the console shares (the inbox, the in-doubt queue): filters folded
away under one summary, a wait chosen from a few ages, and keyset links from one page to the
next, each keeping the filters a person chose."""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import parse_qsl, urlencode

from ._auth import Refused
from ._html import Html, h, join

AGES = {"": None, "5m": 300.0, "1h": 3600.0, "24h": 86400.0}
AGE_WORDS = {"": "any time", "5m": "5 minutes", "1h": "1 hour", "24h": "24 hours"}


def age_of(query: dict[str, str], name: str, what: str) -> float | None:
    """The seconds the ``name`` field asks for, refused (400) unless it is one of ``AGES``."""
    chosen = query.get(name, "")
    if chosen not in AGES:
        raise Refused(400, f"unknown {what} {chosen!r}: pick one of {', '.join(AGES)}")
    return AGES[chosen]


def age_name(seconds: float | None) -> str:
    return next(k for k, v in AGES.items() if v == seconds)


def kept(query: dict[str, str], names: Iterable[str]) -> dict[str, str]:
    """The filters of ``query`` among ``names`` that hold a value, in a stable order."""
    return {k: query[k] for k in names if query.get(k)}


def folded(action: str, fields: Html, used: dict[str, str]) -> Html:
    """The filter form under a summary that says which filters are in use, folded away so a
    phone's first screen shows the list itself, not a column of fields."""
    said = ", ".join(f"{k}: {v}" for k, v in used.items()) if used else "none"
    return h(
        '<details class="filters"><summary>Filters ({said})</summary>'
        '<form method="get" action="{action}">{fields}<button>Filter</button></form></details>',
        said=said,
        action=action,
        fields=fields,
    )


def keyset_links(
    path: str, filters: dict[str, str], *, last: str | None, more: bool, paged: bool, size: int
) -> Html:
    """First-page and next-page links: the next page starts after ``last`` (an id the list's
    read takes as ``after``), so a page deep in the list costs what the first does."""
    links = []
    if paged:
        links.append(h('<a href="{p}?{q}">First page</a>', p=path, q=urlencode(filters)))
    if more and last is not None:
        q = urlencode({**filters, "after": last})
        links.append(h('<a href="{p}?{q}" rel="next">Next {n}</a>', p=path, q=q, n=size))
    if not links:
        return Html()
    return h('<nav class="pages" aria-label="Pages">{l}</nav>', l=join(links))


def local_address(value: str | None, default: str) -> str:
    """Where a form says to go back to, if it is an address of this console; ``default``
    otherwise (a form is the client's to change: never a redirect to another site)."""
    if not value or not value.startswith("/") or value.startswith(("//", "/\\")):
        return default
    if any(c in value for c in "\r\n\\") or any(ord(c) < 32 for c in value):
        return default
    return value


def with_param(address: str, name: str, value: str) -> str:
    """``address`` with ``name=value`` added to its query (replacing one already there)."""
    path, _, query = address.partition("?")
    pairs = [(k, v) for k, v in parse_qsl(query, keep_blank_values=True) if k != name]
    return f"{path}?{urlencode([*pairs, (name, value)])}"
