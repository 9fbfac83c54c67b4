"""What a recorded action looks like to its readers: ``EffectRecord``, made from a row."""

from __future__ import annotations

import json
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
