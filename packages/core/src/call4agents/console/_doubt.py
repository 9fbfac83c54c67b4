"""The in-doubt queue: what may or may not have happened, and settling it."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from starlette.responses import Response

from call4agents import DoubtFilter, EffectRecord, Ledger

from ._auth import Refused
from ._format import clock
from ._listing import (
    AGE_WORDS,
    QUEUE_PAGE,
    address,
    age_name,
    age_of,
    in_use,
    kept,
    local_address,
    queue_pages,
    run_address,
    with_param,
)
from ._web import Ask, decision_form, page, redirect

FILTERS = ("tool", "run", "why", "age")


@dataclass(frozen=True)
class Doubt:
    """An action in doubt as its card shows it (``_doubt.html``)."""

    record: EffectRecord
    run_href: str  # its run's page (remembering the list it is shown on)
    why: str
    lease: str
    evidence: list[tuple[Any, Any, str]]  # attempt, how it ended, its late result or error
    now: float


@dataclass(frozen=True)
class Settled:
    """The action a person just settled, as the page the settling returned to names it."""

    record: EffectRecord
    said: str


def where_of(query: dict[str, str]) -> DoubtFilter:
    text = {k: query.get(k, "").strip() or None for k in ("tool", "run", "why")}
    return DoubtFilter(
        tool=text["tool"],
        run_id=text["run"],
        reason=text["why"],
        older_than=age_of(query, "age", "age"),
    )


def queue(ledger: Ledger, ask: Ask) -> Response:
    where, after = where_of(ask.query), ask.query.get("after") or None
    found, total = ledger.in_doubt_page(where, after=after, limit=QUEUE_PAGE)
    filtered = where != DoubtFilter() or after is not None
    now = time.time()
    here = address("/doubt", ask.query, (*FILTERS, "after"))  # to come back to after settling
    # Live updates only on the first page unfiltered, as in the inbox.
    return page(
        "doubt.html",
        ask.who,
        live=not filtered,
        here="/doubt",
        ids=",".join(r.key for r in found),
        settled=settled_notice(ledger, ask),
        where=where,
        ages=AGE_WORDS,
        age=age_name(where.older_than),
        said=in_use(kept(ask.query, FILTERS)),
        filtered=filtered,
        total=total,
        cards=[card(r, now, run_address(r.run_id, here)) for r in found],
        form=decision_form(ask, here),
        pages=queue_pages("/doubt", ask.query, FILTERS, [r.key for r in found], total),
        size=QUEUE_PAGE,
    )


def settled_notice(ledger: Ledger, ask: Ask) -> Settled | None:
    """What the person just settled, on the page the settling returned to."""
    settled = ask.query.get("settled")
    found = ledger.find(settled) if settled else None
    if found is None or found.resolved_by != ask.who.name:
        return None
    return Settled(found, "it happened" if found.state == "succeeded" else "it did not happen")


def card(record: EffectRecord, now: float, run_href: str) -> Doubt:
    """One action in doubt with what is known of it."""
    details = record.as_dict()
    return Doubt(
        record=record,
        run_href=run_href,
        why=record.note or record.error or "its attempt ended without a result",
        lease=_lease(details["owner"], record.lease_expires_at),
        evidence=[(e.get("attempt"), e.get("state"), _late(e)) for e in record.evidence],
        now=now,
    )


def _late(evidence: dict[str, Any]) -> str:
    return json.dumps(evidence.get("result") or evidence.get("error"), default=str)


def _lease(owner: str | None, until: float | None) -> str:
    # A timeout or an orphaned attempt leaves no live lease; "until" with no time reads as a bug.
    if until is None:
        return f"{owner} (lease released)" if owner else "none (no worker holds it)"
    return f"{owner or 'unknown worker'} (lease until {clock(until)})"


def settle(ledger: Ledger, ask: Ask) -> Response:
    key = ask.path["key"]
    record = ledger.find(key)
    if record is None:
        raise Refused(404, f"there is no action with key {key!r} in this ledger")
    outcome = ask.form.get("outcome")
    if outcome not in ("happened", "did_not_happen"):
        raise Refused(400, "say whether it happened or not: nothing was recorded")
    if record.state != "in_doubt":
        by = f" by {record.resolved_by}" if record.resolved_by else ""
        raise Refused(
            409,
            f"{record.tool} in run {record.run_id} is no longer in doubt (it is "
            f"{record.state}{by}): nothing was recorded",
        )
    happened = outcome == "happened"
    result = _result(ask.form.get("result", "")) if happened else None
    note = ask.form.get("note", "").strip()
    ledger.resolve(key, happened=happened, result=result, by=ask.who.name, note=note)
    back = local_address(ask.form.get("back"), "/doubt")
    return redirect(with_param(back, "settled", key))


def _result(text: str) -> Any:
    if not text.strip():
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise Refused(
            400,
            f"the result is not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno}): "
            "nothing was recorded; go back and correct it",
        ) from exc
