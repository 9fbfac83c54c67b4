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

from ._auth import shown_name

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
    # Focusable: a long value scrolls inside the block, and a keyboard must reach it too.
    return Html(f'<pre class="json" tabindex="0">{shown}</pre>')


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
    """A table; on a phone each row stacks into a card, each cell labelled by its header (the
    ``data-label`` the style sheet shows), so no page scrolls sideways."""
    names = list(headers)
    head = join(h('<th scope="col">{x}</th>', x=x) for x in names)
    body = join(
        Html(
            "<tr>"
            + join(
                h('<td data-label="{label}">{x}</td>', label=label, x=cell)
                for label, cell in zip(names, row, strict=False)
            )
            + "</tr>"
        )
        for row in rows
    )
    return h(
        '<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>',
        cls=cls,
        head=head,
        body=body,
    )


def options(choices: dict[str, str], chosen: str) -> Html:
    """A select's options (value: text), the chosen one selected."""
    return join(
        h(
            '<option value="{v}"{sel}>{t}</option>',
            v=v,
            t=t,
            sel=Html(" selected") if v == chosen else Html(),
        )
        for v, t in choices.items()
    )


def hidden(name: str, value: str) -> Html:
    return h('<input type="hidden" name="{n}" value="{v}">', n=name, v=value)


NAV = (
    ("/", "Approvals"),
    ("/doubt", "In doubt"),
    ("/runs", "Runs"),
    ("/audit", "Audit"),
    ("/health", "Health"),
)


def page(
    title: str, user: str | None, role: str, body: Html, *, live: bool = False, here: str = ""
) -> Html:
    """The whole document: a skip link, navigation, who is signed in, and the page's content.

    With no ``user`` (nobody signed in) there is no navigation: every link would only lead to
    the same refusal."""
    nav = join(
        h(
            '<a href="{href}"{cur}>{text}</a>',
            href=href,
            text=text,
            cur=Html(' aria-current="page"') if href == here else Html(),
        )
        for href, text in NAV
    )
    top = (
        h(
            '<nav aria-label="Console">{nav}</nav>'
            '<span class="who">signed in as <b>{user}</b> ({role})</span>',
            nav=nav,
            user=shown_name(user),
            role=role,
        )
        if user is not None
        else Html()
    )
    return h(
        """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="color-scheme" content="light dark">
<title>{title} - Call4Agents console</title>
<link rel="stylesheet" href="/static/console.css">
<script src="/static/console.js" defer></script>
</head><body data-live="{live}">
<a class="skip" href="#main">Skip to the content</a>
<header><strong>Call4Agents</strong>{top}</header>
<div id="live-note" hidden></div>
<main id="main" tabindex="-1"><h1>{title}</h1>{body}</main>
</body></html>""",
        title=title,
        top=top,
        body=body,
        live="1" if live else "",
    )
