"""Runs: a filterable list, one run's page with its actions, ending and hand-off, and undo."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass

from starlette.responses import Response

from call4agents import AuditEntry, EffectRecord, Ledger, RunSummary
from call4agents.controls import stats
from call4agents.engine.budgets import spending_text
from call4agents.engine.records import STATE_WORDS
from call4agents.engine.undos import undo_for
from call4agents.model.ages import ago
from call4agents.storage import run_controls

from ._auth import Refused
from ._doubt import card, settled_notice
from ._format import clock
from ._listing import WINDOWS, Pages, address, kept, keyset_links, list_back, pick, run_address
from ._web import Ask, decision_form, page

STATES = stats.RUN_STATES
LISTED = 100  # runs to a page
FILTERS = ("state", "tool", "q", "active")
# How recently a listed run was active; counting every run ever recorded is slow on a large ledger.
DEFAULT_WINDOW = "7d"
SETTLEMENTS_READ = 1000


def runs_list(ledger: Ledger, ask: Ask) -> Response:
    tool, text = (ask.query.get(k, "").strip() for k in ("tool", "q"))
    state = pick(ask.query, "state", STATES)
    window = pick(ask.query, "active", WINDOWS, default=DEFAULT_WINDOW, what="window")
    before = _cursor(ask.query)
    ledger.sweep()  # a dead worker's action shows as in doubt, not running
    found = ledger.runs(
        limit=LISTED,
        tool=tool or None,
        search=text or None,
        active_within=WINDOWS[window],
        before=before,
        waiting=True,
    )
    # Runs that only wait for a person have no actions; a full page of the others has a next.
    full = sum(1 for r in found if r.actions) == LISTED
    waiting = Counter(ledger.waiting_by_run([r.run_id for r in found]))
    # One read of the listed runs' endings, not one per run.
    endings = run_controls.statuses_of(ledger.store, [r.run_id for r in found])
    rows = []
    now = time.time()
    here = address("/runs", ask.query, (*FILTERS, "before_at", "before_run"))
    for r in found:
        opened = [s for s, n in (("in_doubt", r.in_doubt), ("started", r.started)) if n]
        derived = endings.get(r.run_id) or stats.run_state(
            opened, waiting=waiting[r.run_id] > 0, failed=r.failed > 0
        )
        if state and derived != state:
            continue
        href, active = run_address(r.run_id, here), ago(r.last_at, now)
        rows.append(Listed(r, href, derived.replace("_", " "), waiting[r.run_id], active))
    return page(
        "runs.html",
        ask.who,
        here="/runs",
        states={s: s.replace("_", " ") or "any state" for s in ("", *STATES)},
        windows={w: w for w in WINDOWS},
        state=state,
        tool=tool,
        text=text,
        window=window,
        rows=rows,
        pages=_pages(ask.query, found[-1] if full and found else None, before is not None),
    )


@dataclass(frozen=True)
class Listed:
    """A run's line in the runs list (``runs.html``)."""

    run: RunSummary
    href: str  # its page, remembering this list's filters and place
    state: str
    waiting: int
    active: str


def _cursor(query: dict[str, str]) -> tuple[float, str] | None:
    at, run = query.get("before_at"), query.get("before_run")
    if at is None and run is None:
        return None
    try:
        return float(at or ""), run or ""
    except ValueError:
        raise Refused(
            400, f"before_at={at!r} is not a time: follow the Next link, or start at /runs"
        ) from None


def _pages(query: dict[str, str], last: RunSummary | None, paged: bool) -> Pages:
    """Keyset links: the next page starts after the last run of this one (its last active time,
    then its id), so a page is as fast at the thousandth run as at the first."""
    older = None if last is None else {"before_at": repr(last.last_at), "before_run": last.run_id}
    return keyset_links("/runs", kept(query, FILTERS), after=older, paged=paged)


def run_page(ledger: Ledger, ask: Ask) -> Response:
    run_id = ask.query.get("id", "")
    ledger.sweep()
    actions = ledger.effects(run_id)
    settled = _settlements(ledger, run_id)
    tickets = ledger.approvals(run_id)
    status = ledger.run_status(run_id)
    if not (actions or tickets or status):
        raise Refused(
            404,
            f"there is no run {run_id!r} in this ledger (no actions, approvals or ending): "
            "see the runs list",
        )
    handoff = ledger.handoff(run_id) if status is not None else None
    now = time.time()
    done = [r for r in actions if r.state == "succeeded" and r.kind != "undo"]
    back = list_back(ask.query.get("back"))
    here = run_address(run_id, back[0] if back else None)
    return page(
        "run.html",
        ask.who,
        run_id=run_id,
        back=back,
        undo_href="/run/undo?" + here.partition("?")[2],
        settled=settled_notice(ledger, ask),
        actions=[_action(i, r, settled.get(r.key)) for i, r in enumerate(actions, 1)],
        # The run's own actions in doubt, each with the form the in-doubt queue shows: an
        # escalated run's hand-off names them, and here they are settled.
        doubts=[card(r, now, here) for r in actions if r.state == "in_doubt"],
        form=decision_form(ask, here),
        tickets=tickets,
        spent=spending_text(ledger, run_id),
        ending=status,
        handoff=None if handoff is None else handoff.text(),
        finished=bool(done),
        undoable=len(_undoable(actions)),
    )


@dataclass(frozen=True)
class Action:
    """An action's row on its run's page (``run.html``)."""

    number: int
    record: EffectRecord
    state: str
    outcome: str
    settled: str
    took: str


def _action(number: int, r: EffectRecord, entry: AuditEntry | None) -> Action:
    outcome = r.result_json if r.state == "succeeded" else (r.error or r.note or "")
    if r.pruned_at is not None:
        outcome = "(result pruned by gc)"
    return Action(
        number=number,
        record=r,
        state=STATE_WORDS.get(r.state, r.state),
        outcome=outcome or "",
        settled=_settled_text(r, entry),
        took=_took(r, entry),
    )


def _settlements(ledger: Ledger, run_id: str) -> dict[str, AuditEntry]:
    """Each action's latest settlement by a person or a reconciler, from the audit: the action's
    own row forgets it once a retry after "did not happen" succeeds; the audit does not."""
    latest: dict[str, AuditEntry] = {}
    for entry in ledger.audit(run_id=run_id, limit=SETTLEMENTS_READ):  # newest first
        if entry.action in ("happened", "did_not_happen"):
            latest.setdefault(entry.key, entry)
    return latest


def _settled_text(r: EffectRecord, entry: AuditEntry | None) -> str:
    if entry is None:
        return (r.note or r.resolved_by or "") if r.resolved_by else ""
    said = "it happened" if entry.action == "happened" else "it did not happen"
    reason = f": {entry.reason}" if entry.reason else ""
    return f"attempt {entry.attempt}: {said}, said {entry.actor} at {clock(entry.at)}{reason}"


def _took(r: EffectRecord, entry: AuditEntry | None) -> str:
    # The ledger keeps when the first attempt began, not each attempt: after a settlement the
    # span from the first attempt to the end is mostly time in doubt, not the tool's, so none is
    # shown. A settled "it happened" never ran to its end here, so it has no time either.
    if r.state not in ("succeeded", "failed") or r.resolved_by or entry is not None:
        return ""
    took = f"{max(0.0, r.updated_at - r.created_at):.3f}s"
    return took if r.attempt == 1 else f"{took} over {r.attempt} attempts"


def _undoable(actions: list[EffectRecord]) -> list[EffectRecord]:
    return [r for r in actions if r.state == "succeeded" and undo_for(r.tool) is not None]


def undo_confirm(ledger: Ledger, ask: Ask) -> Response:
    run_id = ask.query.get("id", "")
    undoable = _undoable(ledger.effects(run_id))
    if not undoable:
        raise Refused(404, f"run {run_id!r} has nothing this console can undo")
    back = list_back(ask.query.get("back"))
    return page(
        "undo.html",
        ask.who,
        run_id=run_id,
        undoable=list(reversed(undoable)),
        form=decision_form(ask, back[0] if back else ""),
        run_href=run_address(run_id, back[0] if back else None),
    )


def undo(ledger: Ledger, ask: Ask) -> Response:
    run_id = ask.form.get("id", "")
    if not _undoable(ledger.effects(run_id)):
        raise Refused(404, f"run {run_id!r} has nothing this console can undo")
    report = ledger.undo(run_id)
    back = list_back(ask.form.get("back"))
    run_href = run_address(run_id, back[0] if back else None)
    return page("undone.html", ask.who, run_id=run_id, report=report.text(), run_href=run_href)
