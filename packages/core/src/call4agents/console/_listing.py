"""What every long list of the console shares (the inbox, the in-doubt queue, runs, the audit):
filters folded away under one summary, a wait chosen from a few ages, and keyset links from one
page to the next, each keeping the filters a person chose (``_parts.html`` draws them)."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass
from urllib.parse import parse_qsl, quote, urlencode

from ._auth import Refused
from ._web import MAX_FILTER_CHARS

# The lists a run's page may lead back to, as its link says them.
LISTS = {
    "/": "the inbox",
    "/doubt": "the in-doubt queue",
    "/runs": "the runs",
    "/audit": "the audit",
}
AGES = {"": None, "5m": 300.0, "1h": 3600.0, "24h": 86400.0}
WINDOWS = {"1h": 3600.0, "24h": 86400.0, "7d": 604800.0, "all": None}  # spans a page looks back
AGE_WORDS = {"": "any time", "5m": "5 minutes", "1h": "1 hour", "24h": "24 hours"}
QUEUE_PAGE = 25  # tickets to a page of the inbox, and actions to a page of the in-doubt queue


def pick(
    query: dict[str, str],
    name: str,
    options: Collection[str],
    *,
    default: str = "",
    what: str | None = None,
) -> str:
    """The ``name`` field of ``query`` (``default`` when left empty), refused (400) unless it is
    one of ``options``; an empty choice passes where it is the default (any state, any kind)."""
    chosen = query.get(name, "").strip() or default
    if chosen and chosen not in options:
        raise Refused(400, f"unknown {what or name} {chosen!r}: pick one of {', '.join(options)}")
    return chosen


def age_of(query: dict[str, str], name: str, what: str) -> float | None:
    """The seconds the ``name`` field asks for, refused (400) unless it is one of ``AGES``."""
    return AGES[pick(query, name, AGES, what=what)]


def age_name(seconds: float | None) -> str:
    return next(k for k, v in AGES.items() if v == seconds)


def kept(query: dict[str, str], names: Iterable[str]) -> dict[str, str]:
    """The filters of ``query`` among ``names`` that hold a value, in a stable order."""
    return {k: query[k] for k in names if query.get(k)}


def in_use(used: dict[str, str]) -> str:
    """What the folded filters' summary says is in use: ``tool: pay, run: shop``, or none."""
    return ", ".join(f"{k}: {v}" for k, v in used.items()) if used else "none"


@dataclass(frozen=True)
class Pages:
    """The links under a list: back to its first page, and on to the next."""

    first: str | None = None
    next: str | None = None


def address(path: str, query: dict[str, str], names: Iterable[str]) -> str:
    """``path`` with the fields of ``query`` among ``names`` that hold a value: a list's page as
    a person filtered (and paged) it, to come back to."""
    found = kept(query, names)
    return path + (f"?{urlencode(found)}" if found else "")


def keyset_links(
    path: str, filters: dict[str, str], *, after: dict[str, str] | None, paged: bool
) -> Pages:
    """First-page and next-page links: the next page starts ``after`` the last of this one (the
    fields a list's read takes as its place), so a page deep in the list costs what the first
    does; None when this page is the last."""
    return Pages(
        first=f"{path}?{urlencode(filters)}" if paged else None,
        next=f"{path}?{urlencode({**filters, **after})}" if after else None,
    )


def queue_pages(
    path: str, query: dict[str, str], names: Iterable[str], ids: list[str], total: int
) -> Pages:
    """The links under a queue (the inbox, the in-doubt queue) showing ``ids`` of the ``total``
    that match: the next page starts ``after`` the last of them, while more match."""
    more = len(ids) == QUEUE_PAGE and total > QUEUE_PAGE
    after = {"after": ids[-1]} if more else None
    return keyset_links(path, kept(query, names), after=after, paged=bool(query.get("after")))


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


def run_address(run_id: str, back: str | None = None) -> str:
    """A run's page; with ``back``, the filtered or paged list it was opened from (when that
    fits in an address), which the run's page links back to and a settling there keeps."""
    address = f"/run?id={quote(run_id, safe='')}"
    if back and "?" in back and len(back) <= MAX_FILTER_CHARS:
        address += f"&back={quote(back, safe='')}"
    return address


def list_back(value: str | None) -> tuple[str, str] | None:
    """The list a run's page was opened from (its ``back``) and the words of the link back to
    it; None for anything but one of the console's lists."""
    address = local_address(value, "")
    path, _, query = address.partition("?")
    if path not in LISTS:
        return None
    return address, f"Back to {LISTS[path]}" + (", as filtered" if query else "")
