"""HTML built from Python: every value is escaped unless it is already markup.

No template engine: the pages are few and small, and a value reaches a page only through
``esc``/``h``, so an argument, a tool's result or a run id can never become markup.
"""

from __future__ import annotations

import html
import json
import time
from collections.abc import Iterable
from typing import Any

REDACTED = "***"  # how the ledger stores a redacted value in what it shows


class Html(str):
    """Text that is already safe markup."""

    __slots__ = ()


def esc(value: object) -> Html:
    if isinstance(value, Html):
        return value
    return Html(html.escape("" if value is None else str(value), quote=True))


def h(template: str, **values: object) -> Html:
    """``template`` with each ``{name}`` replaced by its value, escaped."""
    return Html(template.format(**{name: esc(v) for name, v in values.items()}))


def join(parts: Iterable[Html], sep: str = "") -> Html:
    return Html(sep.join(parts))


def json_block(value: Any) -> Html:
    """Pretty JSON in a <pre>, a redacted value marked so the reader knows it is masked."""
    text = json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)
    shown = esc(text).replace(
        esc(json.dumps(REDACTED)),
        '<mark title="redacted: the tool gets the real value">"***"</mark>',
    )
    return Html(f'<pre class="json">{shown}</pre>')


def count_redacted(value: Any) -> int:
    if isinstance(value, dict):
        return sum(count_redacted(v) for v in value.values())
    if isinstance(value, list):
        return sum(count_redacted(v) for v in value)
    return int(value == REDACTED)


def ago(then: float | None, now: float | None = None) -> str:
    if then is None:
        return ""
    seconds = max(0.0, (now if now is not None else time.time()) - then)
    if seconds < 90:
        return f"{seconds:.0f}s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def clock(at: float | None) -> str:
    if at is None:
        return ""
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(at))


def table(headers: Iterable[str], rows: Iterable[Iterable[object]], cls: str = "") -> Html:
    head = join(h("<th>{x}</th>", x=x) for x in headers)
    body = join(
        Html("<tr>" + join(h("<td>{x}</td>", x=cell) for cell in row) + "</tr>") for row in rows
    )
    return h(
        '<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>',
        cls=cls,
        head=head,
        body=body,
    )


def hidden(name: str, value: str) -> Html:
    return h('<input type="hidden" name="{n}" value="{v}">', n=name, v=value)


def page(title: str, user: str, role: str, body: Html, *, live: bool = False) -> Html:
    """The whole document: navigation, who is signed in, and the page's content."""
    nav = join(
        h('<a href="{href}">{text}</a>', href=href, text=text)
        for href, text in (
            ("/", "Approvals"),
            ("/doubt", "In doubt"),
            ("/runs", "Runs"),
            ("/audit", "Audit"),
            ("/health", "Health"),
        )
    )
    return h(
        """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title} - Call4Agents console</title>
<link rel="stylesheet" href="/static/console.css">
<script src="/static/console.js" defer></script>
</head><body data-live="{live}">
<header><strong>Call4Agents</strong><nav>{nav}</nav>
<span class="who">signed in as <b>{user}</b> ({role})</span></header>
<div id="live-note" hidden></div>
<main><h1>{title}</h1>{body}</main>
</body></html>""",
        title=title,
        nav=nav,
        user=user,
        role=role,
        body=body,
        live="1" if live else "",
    )
