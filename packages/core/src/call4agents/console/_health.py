"""Health: the figures to page on, with simple inline charts, and the live-update endpoint."""

from __future__ import annotations

from starlette.responses import Response

from call4agents import Ledger
from call4agents.controls import stats

from ._auth import Refused
from ._doubt import SHOWN as SHOWN_DOUBT
from ._html import Html, h, join, page, table
from ._inbox import SHOWN_TICKETS
from ._web import Ask, html, json_response

# Windows a person can pick; the figures of actions started in it (open items: whatever age).
WINDOWS = {"1h": 3600.0, "24h": 86400.0, "7d": 604800.0, "all": None}
DEFAULT_WINDOW = "24h"  # all time reads every action ever recorded: slow on a large ledger


def health(ledger: Ledger, ask: Ask) -> Response:
    window = ask.query.get("since", DEFAULT_WINDOW)
    if window not in WINDOWS:
        raise Refused(400, f"unknown window {window!r}: pick one of {', '.join(WINDOWS)}")
    figures = stats.compute(ledger, since=WINDOWS[window])
    picks = join(
        h(
            '<a href="/health?since={w}"{cur}>{w}</a>',
            w=w,
            cur=Html(' aria-current="page"') if w == window else Html(),
        )
        for w in WINDOWS
    )
    rows: list[list[object]] = [
        ["Irreversible executions", figures.irreversible_executions],
        ["Actions", figures.actions],
        ["Executions (attempts started)", figures.executions],
        ["Repeats served from the record", figures.deduped],
        ["Repeat (dedup) rate", "" if figures.dedup_rate is None else f"{figures.dedup_rate:.1%}"],
        ["Open in doubt", figures.in_doubt],
        ["Oldest in doubt", _age(figures.in_doubt_oldest_age)],
        ["Approvals waiting", figures.approvals_waiting],
        ["Oldest approval waiting", _age(figures.approvals_oldest_age)],
    ]
    body = join(
        [
            h('<p class="filters">Actions started in the last: {p}</p>', p=picks),
            table(["Figure", "Value"], rows, "figures"),
            h("<h2>Runs by state</h2>{c}", c=bars(figures.runs_by_state)),
            h("<h2>Actions by state</h2>{c}", c=bars(figures.actions_by_state)),
            h('<p class="note">{n}</p>', n=stats.DEDUP_NOTE),
        ]
    )
    return html(page("Health", ask.who.name, ask.who.role, body))


def _age(seconds: float | None) -> str:
    return "" if seconds is None else f"{seconds:.0f}s"


def bars(counts: dict[str, int]) -> Html:
    """A horizontal bar chart as inline SVG (no script, no style attribute: the CSP allows it)."""
    if not counts:
        return h('<p class="empty">Nothing yet.</p>')
    top = max(counts.values()) or 1
    rows = []
    for i, (name, n) in enumerate(sorted(counts.items())):
        y, width = i * 26, int(300 * n / top)
        rows.append(
            h(
                '<text x="0" y="{ty}" font-size="13">{name}</text>'
                '<rect x="140" y="{y}" width="{w}" height="18" fill="#3b6ea5"></rect>'
                '<text x="{tx}" y="{ty}" font-size="13">{n}</text>',
                ty=y + 14,
                y=y + 1,
                w=max(width, 1),
                tx=146 + width,
                name=name.replace("_", " "),
                n=n,
            )
        )
    return h(
        '<svg class="chart" role="img" width="520" height="{hgt}" xmlns="http://www.w3.org/2000/svg">{rows}</svg>',
        hgt=len(counts) * 26,
        rows=join(rows),
    )


def live(ledger: Ledger, ask: Ask) -> Response:
    """What the pages poll: the open tickets and in-doubt actions, to show new ones at once."""
    figures = stats.open_figures(ledger)
    tickets = [r.ticket for r in ledger.waiting(limit=SHOWN_TICKETS)]
    doubt = [r.key for r in ledger.in_doubt()][:SHOWN_DOUBT]
    return json_response(
        {
            "approvals_waiting": figures.approvals_waiting,
            "in_doubt": figures.in_doubt,
            "tickets": tickets,
            "in_doubt_keys": doubt,
        }
    )
