"""Health: the figures to page on, with simple inline charts, and the live-update endpoint."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

from starlette.responses import Response

from call4agents import Ledger
from call4agents.controls import stats
from call4agents.storage import dead_letters

from ._auth import Refused
from ._doubt import SHOWN as SHOWN_DOUBT
from ._html import Html, clock, h, join, page, table
from ._waiting import SHOWN
from ._web import Ask, html, json_response

# Windows a person can pick; the figures of actions started in it (open items: whatever age).
WINDOWS = {"1h": 3600.0, "24h": 86400.0, "7d": 604800.0, "all": None}
DEFAULT_WINDOW = "24h"  # the page costs what the window holds: a week of a busy ledger is slow
# Buckets of each window's charts; "all" charts the last 7 days (a chart of every day ever
# recorded would read every action).
BUCKETS = {"1h": 12, "24h": 24, "7d": 28, "all": 28}
CHARTED_ALL = 604800.0
DEAD_LETTERS_SHOWN = 50


def health(ledger: Ledger, ask: Ask) -> Response:
    window = ask.query.get("since", DEFAULT_WINDOW)
    if window not in WINDOWS:
        raise Refused(400, f"unknown window {window!r}: pick one of {', '.join(WINDOWS)}")
    since = WINDOWS[window]
    figures = stats.compute(ledger, since=since)
    over_time = stats.series(ledger, since or CHARTED_ALL, BUCKETS[window], ever=since is None)
    unapproved = over_time.unapproved_executions if since is not None else over_time.unapproved_ever
    escalations, escalation_age = stats.open_escalations(ledger)
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
        [
            "Approval-required actions executed without a yes (must stay 0)",
            h('<b class="{c}">{n}</b>', c="bad" if unapproved else "zero", n=unapproved),
        ],
        ["Actions", figures.actions],
        ["Executions (attempts started)", figures.executions],
        ["Repeats served from the record", figures.deduped],
        ["Repeat (dedup) rate", "" if figures.dedup_rate is None else f"{figures.dedup_rate:.1%}"],
        ["Open in doubt", figures.in_doubt],
        ["Oldest in doubt", _age(figures.in_doubt_oldest_age)],
        ["Approvals waiting", figures.approvals_waiting],
        ["Oldest approval waiting", _age(figures.approvals_oldest_age)],
        ["Escalations nobody picked up", escalations],
        ["Oldest of them", _age(escalation_age)],
        [
            h('Webhook events given up (<a href="#dead-letters">listed below</a>)')
            if figures.webhooks_dead
            else "Webhook events given up",
            figures.webhooks_dead,
        ],
    ]
    charted = "the last 7 days" if since is None else f"the last {window}"
    body = join(
        [
            h('<p class="filters">Actions started in the last: {p}</p>', p=picks),
            table(["Figure", "Value"], rows, "figures"),
            _dead_letters(ledger) if figures.webhooks_dead else Html(),
            h(
                '<h2>Over time</h2><p class="note">{when}, in {n} buckets of {b}. Open '
                "figures are as they stood at each bucket's end.</p>",
                when=charted[0].upper() + charted[1:],
                n=len(over_time.buckets),
                b=_age(over_time.bucket_seconds),
            ),
            _charts(over_time),
            h("<h2>Runs by state</h2>{c}", c=bars(figures.runs_by_state, "Runs by state")),
            h("<h2>Actions by state</h2>{c}", c=bars(figures.actions_by_state, "Actions by state")),
            h('<p class="note">{n}</p>', n=stats.DEDUP_NOTE),
        ]
    )
    return html(page("Health", ask.who.name, ask.who.role, body, here="/health"))


Chart = tuple[str, str, Sequence[float | None], Callable[[float], str]]


def _charts(over_time: stats.Series) -> Html:
    b = over_time.buckets
    endings = sorted({reason for x in b for reason in x.runs_ended})
    charts: list[Chart] = [
        ("irreversible", "Irreversible executions", [x.irreversible_executions for x in b], _n),
        (
            "unapproved",
            "Executed without a yes (must stay 0)",
            [x.unapproved_executions for x in b],
            _n,
        ),
        ("dedup", "Repeat (dedup) rate", [x.dedup_rate for x in b], _pct),
        ("in-doubt", "Open in doubt", [x.in_doubt_open for x in b], _n),
        ("waiting", "Approvals waiting", [x.approvals_waiting for x in b], _n),
        ("waiting-age", "Oldest approval's wait", [x.approvals_oldest_age for x in b], _age),
        (
            "escalation-age",
            "Escalation backlog: the oldest's age",
            [x.escalations_oldest_age for x in b],
            _age,
        ),
        *(
            (f"ended-{r}", f"Runs ended: {r}", [x.runs_ended.get(r, 0) for x in b], _n)
            for r in endings
        ),
        ("cost-p95", "Cost per run, p95", [x.cost_per_run_p95 for x in b], _num),
        ("cost-p99", "Cost per run, p99", [x.cost_per_run_p99 for x in b], _num),
    ]
    if not endings:
        charts.insert(7, ("ended", "Runs ended (by reason)", [0 for _ in b], _n))
    first, last = (b[0].start, b[-1].end) if b else (0.0, 0.0)
    return h(
        '<div class="charts">{c}</div>',
        c=join(columns(*chart, first, last) for chart in charts),
    )


def _n(value: float) -> str:
    return f"{value:.0f}"


def _pct(value: float) -> str:
    return f"{value:.1%}"


def _num(value: float) -> str:
    return f"{value:.4g}"


def columns(
    name: str,
    title: str,
    values: Sequence[float | None],
    fmt: Callable[[float], str],
    first: float,
    last: float,
) -> Html:
    """One figure over time as an inline SVG column chart: no script, no style attribute (the
    CSP allows it), each column's value in its tooltip; an empty bucket draws no column."""
    width, height, top = 360, 90, 14
    present = [v for v in values if v is not None]
    peak = max(present, default=0) or 1
    step = width / max(1, len(values))
    cols = []
    for i, value in enumerate(values):
        if value is None:
            continue
        tall = max(1.0 if value else 0.0, (height - top) * value / peak)
        cols.append(
            h(
                '<rect x="{x}" y="{y}" width="{w}" height="{hg}"><title>{t}</title></rect>',
                x=f"{i * step + 1:.1f}",
                y=f"{height - tall:.1f}",
                w=f"{max(1.0, step - 2):.1f}",
                hg=f"{tall:.1f}",
                t=fmt(value),
            )
        )
    latest = next((v for v in reversed(values) if v is not None), None)
    alarm = name == "unapproved" and any(present)
    return h(
        '<figure class="chart" id="chart-{name}"><figcaption>{title}: <b>{now}</b> '
        '<span class="peak">(highest {peak})</span></figcaption>'
        '<svg role="img" aria-label="{title} over time, from {a} to {b}: latest {now}, '
        'highest {peak}" width="{w}" height="{hh}" '
        'viewBox="0 0 {w} {hh}" xmlns="http://www.w3.org/2000/svg">'
        '<line x1="0" y1="{hg}" x2="{w}" y2="{hg}" stroke="#8893a2"></line>'
        '<g class="{cls}" fill="{fill}">{cols}</g>'
        '<text x="0" y="{ty}" font-size="11">{a}</text>'
        '<text x="{w}" y="{ty}" font-size="11" text-anchor="end">{b}</text></svg></figure>',
        name=name,
        title=title,
        now="none" if latest is None else fmt(latest),
        peak=fmt(max(present)) if present else "none",
        w=width,
        hh=height + 16,
        hg=height,
        ty=height + 13,
        fill="#c62828" if alarm else "#3b6ea5",
        cls="alarm" if alarm else "bar",
        cols=join(cols),
        a=clock(first)[:16],
        b=clock(last)[:16],
    )


def _age(seconds: float | None) -> str:
    if seconds is None:
        return ""
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.0f}s"


def bars(counts: dict[str, int], title: str) -> Html:
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
                '<rect class="bar" x="140" y="{y}" width="{w}" height="18" fill="#3b6ea5"></rect>'
                '<text x="{tx}" y="{ty}" font-size="13">{n}</text>',
                ty=y + 14,
                y=y + 1,
                w=max(width, 1),
                tx=146 + width,
                name=name.replace("_", " "),
                n=n,
            )
        )
    # The picture's text alternative says every bar's figure, for a screen reader.
    said = ", ".join(f"{name.replace('_', ' ')} {n}" for name, n in sorted(counts.items()))
    return h(
        '<svg class="chart" role="img" aria-label="{label}" width="520" height="{hgt}" '
        'viewBox="0 0 520 {hgt}" xmlns="http://www.w3.org/2000/svg">{rows}</svg>',
        label=f"{title}: {said}",
        hgt=len(counts) * 26,
        rows=join(rows),
    )


def live(ledger: Ledger, ask: Ask) -> Response:
    """What the pages poll: the open tickets and in-doubt actions, to show new ones at once."""
    figures = stats.open_figures(ledger)
    tickets = [r.ticket for r in ledger.waiting(limit=SHOWN)]
    # The queue's first page, in its order, read as the page reads it (not every action in doubt).
    doubt = [r.key for r in ledger.in_doubt_page(limit=SHOWN_DOUBT)[0]]
    return json_response(
        {
            "approvals_waiting": figures.approvals_waiting,
            "in_doubt": figures.in_doubt,
            "tickets": tickets,
            "in_doubt_keys": doubt,
        }
    )


def _dead_letters(ledger: Ledger) -> Html:
    """The webhook events given up on, oldest first: what a receiver never got."""
    letters = dead_letters.waiting(ledger.store, limit=DEAD_LETTERS_SHOWN)
    rows: list[list[object]] = [
        [d.id, _event_name(d.event), d.receiver, d.error, d.attempts] for d in letters
    ]
    return join(
        [
            h(
                '<h2 id="dead-letters">Webhook events given up</h2><p class="note">Every '
                "attempt failed or the receiver's queue was full. <code>call4agents webhooks "
                "--replay</code> posts them again (each keeps its <code>id</code>, so a receiver "
                "can drop a repeat).</p>"
            ),
            table(["Id", "Event", "Receiver", "Why", "Attempts"], rows, "dead-letters"),
        ]
    )


def _event_name(event: str) -> str:
    try:
        return str(json.loads(event).get("event", ""))
    except (ValueError, AttributeError):
        return ""
