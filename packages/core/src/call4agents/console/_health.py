"""Health: the figures to page on, with simple inline charts, and the live-update endpoint."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from starlette.responses import Response

from call4agents import Ledger
from call4agents.controls import stats
from call4agents.model.ages import age
from call4agents.storage import dead_letters

from ._format import clock
from ._listing import QUEUE_PAGE, WINDOWS, pick
from ._web import Ask, json_response, page

# The figures of actions started in the window picked (open items: whatever age).
DEFAULT_WINDOW = "24h"  # the page costs what the window holds: a week of a busy ledger is slow
# Buckets of each window's charts; "all" charts the last 7 days (a chart of every day ever
# recorded would read every action).
BUCKETS = {"1h": 12, "24h": 24, "7d": 28, "all": 28}
CHARTED_ALL = 604800.0
DEAD_LETTERS_SHOWN = 50


def health(ledger: Ledger, ask: Ask) -> Response:
    window = pick(ask.query, "since", WINDOWS, default=DEFAULT_WINDOW, what="window")
    since = WINDOWS[window]
    figures = stats.compute(ledger, since=since)
    over_time = stats.series(ledger, since or CHARTED_ALL, BUCKETS[window], ever=since is None)
    unapproved = over_time.unapproved_executions if since is not None else over_time.unapproved_ever
    opened = stats.open_figures(ledger)
    rows: list[tuple[str, object, str]] = [  # figure, value, how the page marks it
        ("Irreversible executions", figures.irreversible_executions, ""),
        ("Approval-required actions executed without a yes (must stay 0)", unapproved, "zero"),
        ("Actions", figures.actions, ""),
        ("Executions (attempts started)", figures.executions, ""),
        ("Repeats served from the record", figures.deduped, ""),
        (
            "Repeat (dedup) rate",
            "" if figures.dedup_rate is None else f"{figures.dedup_rate:.1%}",
            "",
        ),
        ("Open in doubt", figures.in_doubt, ""),
        ("Oldest in doubt", age(figures.in_doubt_oldest_age), ""),
        ("Approvals waiting", figures.approvals_waiting, ""),
        ("Oldest approval waiting", age(figures.approvals_oldest_age), ""),
        ("Escalations nobody picked up", opened.escalations_open, ""),
        ("Oldest of them", age(opened.escalations_oldest_age), ""),
        ("Webhook events given up", figures.webhooks_dead, "dead"),
    ]
    charted = "the last 7 days" if since is None else f"the last {window}"
    return page(
        "health.html",
        ask.who,
        here="/health",
        windows=list(WINDOWS),
        window=window,
        rows=rows,
        letters=_dead_letters(ledger) if figures.webhooks_dead else [],
        charted=charted[0].upper() + charted[1:],
        buckets=len(over_time.buckets),
        bucket=age(over_time.bucket_seconds),
        charts=_charts(over_time),
        runs=bars(figures.runs_by_state, "Runs by state"),
        actions=bars(figures.actions_by_state, "Actions by state"),
        note=stats.DEDUP_NOTE,
    )


Chart = tuple[str, str, Sequence[float | None], Callable[[float], str]]


def _charts(over_time: stats.Series) -> list[Columns]:
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
        ("waiting-age", "Oldest approval's wait", [x.approvals_oldest_age for x in b], age),
        (
            "escalation-age",
            "Escalation backlog: the oldest's age",
            [x.escalations_oldest_age for x in b],
            age,
        ),
        *(
            (f"ended-{r}", f"Runs ended: {r}", [x.runs_ended.get(r, 0) for x in b], _n)
            for r in endings
        ),
        ("cost-p95", "Cost per run, p95", [x.cost_per_run_p95 for x in b], stats.number),
        ("cost-p99", "Cost per run, p99", [x.cost_per_run_p99 for x in b], stats.number),
    ]
    if not endings:
        charts.insert(7, ("ended", "Runs ended (by reason)", [0 for _ in b], _n))
    first, last = (b[0].start, b[-1].end) if b else (0.0, 0.0)
    return [columns(*chart, first, last) for chart in charts]


def _n(value: float) -> str:
    return f"{value:.0f}"


def _pct(value: float) -> str:
    return f"{value:.1%}"


@dataclass(frozen=True)
class Columns:
    """One figure over time, as ``health.html`` draws it: an inline SVG column chart."""

    name: str
    title: str
    now: str  # the latest bucket's value
    peak: str
    alarm: bool  # a figure that must stay 0 and did not
    cols: list[dict[str, str]]  # each column's x, y, width, height and value (its tooltip)
    first: str
    last: str


WIDTH, HEIGHT, TOP = 360, 90, 14  # a column chart's drawing, and the room above its highest


def columns(
    name: str,
    title: str,
    values: Sequence[float | None],
    fmt: Callable[[float], str],
    first: float,
    last: float,
) -> Columns:
    """One figure over time: no script, no style attribute (the CSP allows it), each column's
    value in its tooltip; an empty bucket draws no column."""
    present = [v for v in values if v is not None]
    peak = max(present, default=0) or 1
    step = WIDTH / max(1, len(values))
    cols = []
    for i, value in enumerate(values):
        if value is None:
            continue
        tall = max(1.0 if value else 0.0, (HEIGHT - TOP) * value / peak)
        cols.append(
            {
                "x": f"{i * step + 1:.1f}",
                "y": f"{HEIGHT - tall:.1f}",
                "w": f"{max(1.0, step - 2):.1f}",
                "h": f"{tall:.1f}",
                "said": fmt(value),
            }
        )
    latest = next((v for v in reversed(values) if v is not None), None)
    return Columns(
        name=name,
        title=title,
        now="none" if latest is None else fmt(latest),
        peak=fmt(max(present)) if present else "none",
        alarm=name == "unapproved" and any(present),
        cols=cols,
        first=clock(first)[:16],
        last=clock(last)[:16],
    )


@dataclass(frozen=True)
class Bars:
    """Counts by name as a horizontal bar chart (``health.html``); its text alternative says
    every bar's figure, for a screen reader."""

    label: str
    height: int
    rows: list[tuple[str, int, int]]  # name, count, bar width


def bars(counts: dict[str, int], title: str) -> Bars | None:
    if not counts:
        return None
    top = max(counts.values()) or 1
    named = [(name.replace("_", " "), n) for name, n in sorted(counts.items())]
    said = ", ".join(f"{name} {n}" for name, n in named)
    return Bars(
        label=f"{title}: {said}",
        height=len(counts) * 26,
        rows=[(name, n, int(300 * n / top)) for name, n in named],
    )


def live(ledger: Ledger, ask: Ask) -> Response:
    """What the pages poll: the open tickets and in-doubt actions, to show new ones at once."""
    figures = stats.open_figures(ledger)
    tickets = [r.ticket for r in ledger.waiting(limit=QUEUE_PAGE)]
    # The queue's first page, in its order, read as the page reads it (not every action in doubt).
    doubt = [r.key for r in ledger.in_doubt_page(limit=QUEUE_PAGE)[0]]
    return json_response(
        {
            "approvals_waiting": figures.approvals_waiting,
            "in_doubt": figures.in_doubt,
            "tickets": tickets,
            "in_doubt_keys": doubt,
        }
    )


def _dead_letters(ledger: Ledger) -> list[list[object]]:
    """The webhook events given up on, oldest first: what a receiver never got."""
    letters = dead_letters.waiting(ledger.store, limit=DEAD_LETTERS_SHOWN)
    return [[d.id, _event_name(d.event), d.receiver, d.error, d.attempts] for d in letters]


def _event_name(event: str) -> str:
    try:
        return str(json.loads(event).get("event", ""))
    except (ValueError, AttributeError):
        return ""
