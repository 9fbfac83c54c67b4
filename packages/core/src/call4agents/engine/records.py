"""What a recorded action and a run look like to their readers: ``EffectRecord``, made from a
row, and ``RunSummary``."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from call4agents.engine import _owner
from call4agents.engine.context import idempotency_key

# An action's state as the CLI's tables and the console's pages word it.
STATE_WORDS = {
    "succeeded": "done",
    "failed": "failed",
    "in_doubt": "in doubt",
    "started": "running",
}


@dataclass(frozen=True)
class EffectRecord:
    """One recorded action, as ``effects()``, ``in_doubt()`` and the CLI show it."""

    key: str
    seq: int
    run_id: str
    tool: str
    kind: str
    state: str
    attempt: int
    args: dict[str, Any]
    result_json: str | None
    error: str | None
    note: str | None
    resolved_by: str | None
    owner: str | None
    lease_expires_at: float | None
    created_at: float
    updated_at: float
    pruned_at: float | None
    evidence: list[dict[str, Any]]

    @property
    def idempotency_key(self) -> str:
        return idempotency_key(self.key)

    @property
    def result(self) -> Any:
        """The recorded result, decoded to its original type (None if there is none)."""
        # Imported here: the codec (uuid, decimal) is not needed to list records, as `doubt` does.
        from call4agents.model.codec import decode_result

        return decode_result(self.result_json) if self.result_json is not None else None

    def as_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "run_id": self.run_id,
            "tool": self.tool,
            "kind": self.kind,
            "state": self.state,
            "attempt": self.attempt,
            "args": self.args,
            "result": json.loads(self.result_json) if self.result_json else None,
            "error": self.error,
            "note": self.note,
            "resolved_by": self.resolved_by,
            "owner": _owner.describe(self.owner) if self.owner else None,
            "idempotency_key": self.idempotency_key,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "pruned": self.pruned_at is not None,
            "evidence": self.evidence,
        }


def record_of(m: Any) -> EffectRecord:
    """The record of one row of ``c4a_effects``, read as a mapping of its columns."""
    return EffectRecord(
        key=m["key"],
        seq=m["seq"],
        run_id=m["run_id"],
        tool=m["tool"],
        kind=m["kind"],
        state=m["state"],
        attempt=m["attempt"],
        args=json.loads(m["args"]) if m["args"] else {},
        result_json=m["result"],
        error=m["error"],
        note=m["note"],
        resolved_by=m["resolved_by"],
        owner=m["owner"],
        lease_expires_at=m["lease_expires_at"],
        created_at=m["created_at"],
        updated_at=m["updated_at"],
        pruned_at=m["pruned_at"],
        evidence=json.loads(m["evidence"]) if m["evidence"] else [],
    )


__all__ = ["EffectRecord", "idempotency_key", "record_of"]


@dataclass(frozen=True)
class RunSummary:
    run_id: str
    actions: int
    succeeded: int
    failed: int
    in_doubt: int
    started: int
    first_at: float
    last_at: float


def with_waiting_runs(
    found: list[RunSummary],
    asked: Sequence[Mapping[str, Any]],
    *,
    full: bool,
    cutoff: float | None,
    before: tuple[float, str] | None,
) -> list[RunSummary]:
    """The runs with actions, and those whose only record is one of the waiting tickets
    ``asked`` (newest first, filtered as the list is), each spanning its tickets' times."""
    known = {r.run_id for r in found}
    spans: dict[str, list[float]] = {}
    for t in asked:
        if t["run_id"] not in known and (cutoff is None or t["requested_at"] >= cutoff):
            spans.setdefault(t["run_id"], []).append(float(t["requested_at"]))
    extra = [RunSummary(run, 0, 0, 0, 0, 0, min(at), max(at)) for run, at in spans.items()]
    if before is not None:
        extra = [r for r in extra if (r.last_at, r.run_id) < before]
    merged = sorted(found + extra, key=lambda r: (r.last_at, r.run_id), reverse=True)
    # A full page of runs with actions decides where the next page starts; runs that only wait
    # for a person fill in among them, and all of the rest on the last page.
    if full:
        last = (found[-1].last_at, found[-1].run_id)
        merged = [r for r in merged if (r.last_at, r.run_id) >= last]
    return merged
