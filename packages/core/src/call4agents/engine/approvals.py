"""A person's "yes" bound to exactly one action, and the gate that spends it with the intent.

An approval is a ticket row: (ticket, action key, the attempt it would start, state, who decided).
The action key already hashes run, tool and canonical arguments, so a yes for one call is no yes
for another. Every state a ticket reaches is signed with the ledger secret over the whole row, so
a row copied, edited or written by hand verifies as nothing. The decision and its spending are one
record: deleting a "spent" or "denied" ticket leaves no approval at all, and an old "approved"
row put back beside its action names an attempt that has already been started, so it cannot be
spent. A whole ledger restored from a backup is the ledger as it was then: a yes spent after the
backup is unspent again, with its action's row gone (docs/approvals.md says what to settle
after one).

Each ticket also records the framework's call id it was opened for: a yes a framework keys by call
id covers only the arguments first shown under that id (see ``first_shown``).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from call4agents.model.errors import ApprovalDenied, ApprovalRequired, Call4AgentsError, LedgerError
from call4agents.storage import approval_rows as rows
from call4agents.storage import audit_rows
from call4agents.storage.store import Conn, clock

if TYPE_CHECKING:
    from call4agents.engine.ledger_core import LedgerCore

    from .action import Action


@dataclass(frozen=True)
class ApprovalRequest:
    """What a person is asked to approve: exactly what will run, redacted values masked."""

    ticket: str
    run_id: str
    tool: str
    key: str
    args: dict[str, Any]
    state: str
    requested_at: float
    expires_at: float
    decided_by: str | None = None
    reason: str | None = None
    for_attempt: int = 1  # the one attempt of the action this ticket may start
    args_digest: str | None = None  # of the arguments asked about (see Action.args_digest)
    # Which policy asked, and the tool's side-effect kind, when the ticket was opened.
    asked_by: str | None = None
    kind: str | None = None
    # Per argument holding a redacted value, a digest of it (never the value); None when nothing
    # was redacted or on tickets from before schema version 13. See ``masked_changes``.
    redacted_marks: dict[str, str] | None = None

    def covers(self, action: Action) -> bool:
        """Whether this ticket asked about exactly this call's arguments. One action key can
        stand for calls with other arguments (``key=``, an MCP client key); a yes covers only
        what it showed, a redacted value included (by its digest)."""
        return action.same_args(self.args_digest)

    def is_open(self, now: float) -> bool:
        """Whether a person may still answer it at ``now``: pending and not expired."""
        return self.state == "pending" and self.expires_at > now

    def as_dict(self) -> dict[str, Any]:
        return {
            "ticket": self.ticket,
            "run_id": self.run_id,
            "tool": self.tool,
            "args": self.args,
            "state": self.state,
            "action_key": self.key,
            "requested_at": self.requested_at,
            "expires_at": self.expires_at,
            "decided_by": self.decided_by,
            "reason": self.reason,
            "for_attempt": self.for_attempt,
            "asked_by": self.asked_by,
            "kind": self.kind,
        }


class Signer:
    """HMAC signatures with key ids, so a rotated-out secret still verifies until its end date.

    The end date is judged by the database's clock, read with the ticket being verified, like
    every other time window of the ledger.
    """

    def __init__(self, current: bytes, previous: Sequence[tuple[bytes, float]]) -> None:
        self._current = current
        self._keys: dict[str, tuple[bytes, float]] = {_kid(current): (current, math.inf)}
        for secret, until in previous:
            self._keys.setdefault(_kid(secret), (secret, until))

    def sign(self, fields: Sequence[Any]) -> str:
        return _kid(self._current) + ":" + _mac(self._current, fields)

    def verify(self, fields: Sequence[Any], signature: str | None, *, now: float) -> bool:
        kid, _, mac = (signature or "").partition(":")
        secret, until = self._keys.get(kid, (b"", -math.inf))
        return until > now and hmac.compare_digest(mac, _mac(secret, fields))


def _kid(secret: bytes) -> str:
    return hashlib.sha256(b"c4a-kid|" + secret).hexdigest()[:8]


def _mac(secret: bytes, fields: Sequence[Any]) -> str:
    payload = json.dumps(list(fields), separators=(",", ":"), ensure_ascii=True)
    return hmac.new(secret, payload.encode(), hashlib.sha256).hexdigest()


_SIGNED = (
    "ticket",
    "key",
    "for_attempt",
    "run_id",
    "tool",
    "args",
    "state",
    "expires_at",
    "decided_by",
)


def _fields(row: Mapping[str, Any]) -> list[Any]:
    digest, call_id = row.get("args_digest"), row.get("call_id")
    asked_by, kind = row.get("asked_by"), row.get("kind")
    marks = row.get("redacted_marks")
    # The call id and the marks are signed when the ticket has them. What the inbox shows of
    # who asked, or of whether a masked value changed, cannot be edited unseen.
    return (
        [row[name] for name in _SIGNED]
        + [digest]
        + ([f"call:{call_id}"] if call_id is not None else [])
        + [f"asked:{asked_by}", f"kind:{kind}"]
        + ([f"marks:{marks}"] if marks is not None else [])
    )


def _covers(row: Mapping[str, Any], action: Action) -> bool:
    """ApprovalRequest.covers, for a ticket row."""
    return action.same_args(row["args_digest"])


def request_of(row: Mapping[str, Any]) -> ApprovalRequest:
    """The ticket of one row of ``c4a_approvals``, read as a mapping of its columns."""
    return ApprovalRequest(
        ticket=row["ticket"],
        run_id=row["run_id"],
        tool=row["tool"],
        key=row["key"],
        args=json.loads(row["args"]),
        state=row["state"],
        requested_at=row["requested_at"],
        expires_at=row["expires_at"],
        decided_by=row["decided_by"],
        reason=row["reason"],
        for_attempt=row["for_attempt"],
        args_digest=row.get("args_digest"),
        asked_by=row.get("asked_by"),
        kind=row.get("kind"),
        redacted_marks=json.loads(marks) if (marks := row.get("redacted_marks")) else None,
    )


def redacted_marks(action: Action) -> str | None:
    """For each argument in which something was redacted, a digest of that argument's key
    material, where every redacted value already stands as an HMAC under the ledger's salt: equal
    marks mean equal values, and no mark can be turned back into a value without the salt."""
    if action.args_material == action.args_display:  # nothing was redacted
        return None
    material, shown = json.loads(action.args_material), json.loads(action.args_display)
    marks = {
        name: hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:32]
        for name, value in material.items()
        if value != shown.get(name)
    }
    return json.dumps(marks, sort_keys=True) if marks else None


def asked_by(action: Action, *, framework: bool = False) -> str:
    """Which policy asked a person about this call, in words the inbox shows."""
    rule = action.options.approval
    if framework and not action.needs_approval:
        return "the agent framework's own approval step (the tool itself does not require one)"
    if rule is None:
        return (
            f"the ledger's approval policy: {action.options.kind} tools need a person's yes "
            "(approval_for)"
        )
    if callable(rule):
        name = getattr(rule, "__qualname__", None) or type(rule).__name__
        return f"the tool's rule approval={name}, which asked for these arguments"
    return "the tool: approval=True (every call needs a person's yes)"


# -- the gate: runs inside the claim transaction --------------------------------------------------


@dataclass(frozen=True)
class Gate:
    """What must hold before a new attempt of an action may start."""

    ledger: LedgerCore
    action: Action
    approval: bool
    max_per_run: int | None
    ttl: float

    def __call__(self, conn: Conn, attempt: int) -> Call4AgentsError | None:
        """Spend a valid yes for ``attempt`` (or check the limit); else the refusal to raise.

        Runs in the same transaction as the intent's INSERT, so a crash can neither burn a yes
        without the intent nor leave the intent without its yes being spent.
        """
        refusal = self._over_limit(conn)
        if refusal is not None or not self.approval:
            return refusal
        return _spend_or_ask(self, conn, attempt)

    def _over_limit(self, conn: Conn) -> Call4AgentsError | None:
        if self.max_per_run is None:
            return None
        action = self.action
        rows.hold(conn, f"{action.run_id}|{action.tool}")  # count and insert under one lock
        done = rows.calls_in_run(conn, action.run_id, action.tool)
        if done < self.max_per_run:
            return None
        reason = f"limit reached: at most {self.max_per_run} run(s) of {action.tool} per run"
        return _refused(action, reason, f"refused ({reason})")


def _spend_or_ask(gate: Gate, conn: Conn, attempt: int) -> Call4AgentsError | None:
    action, signer = gate.action, gate.ledger.signer()
    # Two workers asking at once would each find no ticket and open one: the person would be
    # asked twice. One at a time per action: the second finds the first one's ticket.
    rows.hold(conn, f"ask|{action.key}")
    found = rows.for_attempt(conn, action.key, attempt)
    valid = [r for r in found if signer.verify(_fields(r), r["signature"], now=r["now"])]
    tampered = len(valid) < len(found)
    # An answer covers the arguments it showed. Under a key= of the caller's, one action may be
    # called with others: those are asked about on a ticket of their own.
    valid = [r for r in valid if _covers(r, action)]
    live = [r for r in valid if r["expires_at"] > r["now"]]
    denied = next((r for r in valid if r["state"] == "denied"), None)
    if denied is not None:  # a no wins over any yes, whatever order they were written in
        reason = f"denied by {denied['decided_by']}"
        return _refused(action, reason + (f": {denied['reason']}" if denied["reason"] else ""))
    yes = next((r for r in live if r["state"] == "approved"), None)
    if yes is not None:
        rows.spend(conn, yes["ticket"], signer.sign(_fields({**yes, "state": "spent"})))
        return None
    pending = next((r for r in live if r["state"] == "pending"), None)
    shown = _edited(conn, signer, action)
    if pending:
        return _required(action, request_of(pending), tampered=tampered, shown=shown)
    request = _new_ticket(conn, signer, action, attempt, ttl=gate.ttl, asked=asked_by(action))
    return _required(action, request, tampered=tampered, shown=shown)


def _new_ticket(
    conn: Conn,
    signer: Signer,
    action: Action,
    attempt: int,
    *,
    ttl: float,
    state: str = "pending",
    by: str | None = None,
    reason: str | None = None,
    asked: str | None = None,
) -> ApprovalRequest:
    """Write one signed ticket for ``attempt`` of the action: asked (pending) or decided."""
    stamp = clock(conn)
    row = {
        "ticket": "apr_" + secrets.token_hex(10),
        "key": action.key,
        "for_attempt": attempt,
        "run_id": action.run_id,
        "tool": action.tool,
        "args": action.args_display,
        "args_digest": action.args_digest,
        "call_id": action.call_id if action.call_id_stable else None,
        "asked_by": asked,
        "kind": action.options.kind,
        "redacted_marks": redacted_marks(action),
        "state": state,
        "expires_at": float(stamp) + ttl,
        "decided_by": by,
    }
    decided_at = stamp if by is not None else None
    rows.insert(
        conn,
        {
            **row,
            "requested_at": stamp,
            "decided_at": decided_at,
            "reason": reason,
            "signature": signer.sign(_fields(row)),
        },
    )
    return request_of({**row, "requested_at": stamp, "reason": reason})


def _first_for_call(conn: Conn, signer: Signer, run_id: str, call_id: str) -> dict[str, Any] | None:
    """The first validly signed ticket opened for a framework's call id in a run, as a row."""
    for row in rows.for_call(conn, run_id, call_id):
        if signer.verify(_fields(row), row["signature"], now=row["now"]):
            return row
    return None


def _edited(conn: Conn, signer: Signer, action: Action) -> ApprovalRequest | None:
    """The ticket first shown for this call, if the call now carries other arguments: a saved
    state edited after it was shown (the framework keys the yes by call id, not arguments)."""
    if not action.call_id or not action.call_id_stable:
        return None
    first = _first_for_call(conn, signer, action.run_id, action.call_id)
    return None if first is None or _covers(first, action) else request_of(first)


def first_shown(ledger: LedgerCore, action: Action) -> ApprovalRequest | None:
    """The ticket first shown for ``action``'s call id if it showed other arguments, else None."""
    with ledger.store.read() as conn:
        return _edited(conn, ledger.signer(), action)


def _required(
    action: Action,
    request: ApprovalRequest,
    *,
    tampered: bool,
    shown: ApprovalRequest | None = None,
) -> ApprovalRequired:
    note = (
        " (an earlier approval record failed its signature check and was ignored)"
        if tampered
        else ""
    )
    if shown is not None:
        note += (
            f". Its arguments changed since they were shown for this call: {shown.ticket} "
            f"showed {json.dumps(shown.args, sort_keys=True)}, the call now has "
            f"{action.args_display}; a yes given for the call covers only what was shown, so "
            "a person must decide the new arguments"
        )
    return ApprovalRequired(
        f"{action.tool} in run {action.run_id!r} needs a person's approval before it runs{note}. "
        f"Approve exactly this call with `call4agents approve {request.ticket}` (or "
        f"ledger.approve({request.ticket!r}, by=...)); it has not run.",
        key=action.key,
        run_id=action.run_id,
        tool=action.tool,
        request=request,
        shown=shown,
    )


def _refused(action: Action, reason: str, what: str | None = None) -> ApprovalDenied:
    """A call not let run (a person's no, the per-run limit): it ``was {what}`` (the reason)."""
    return ApprovalDenied(
        f"{action.tool} in run {action.run_id!r} was {what or reason}; it did not run.",
        key=action.key,
        run_id=action.run_id,
        tool=action.tool,
        reason=reason,
    )


# -- decisions -------------------------------------------------------------------------------------


def decide(
    ledger: LedgerCore,
    ticket: str,
    *,
    approve: bool,
    by: str,
    reason: str | None,
    only_if_pending: bool = False,
) -> ApprovalRequest:
    """Record a person's answer to a pending ticket. Twice the same answer is one answer.

    With ``only_if_pending`` a ticket someone already answered is returned as it stands, its
    answer untouched: two people deciding at once, the first answer stands and the second sees it.
    """
    _check_by(by)
    signer = ledger.signer()
    with ledger.store.tx() as conn:
        row = rows.locked(conn, ticket)
        if row is None:
            raise LedgerError(f"no approval ticket {ticket!r} in {ledger.url}")
        if not signer.verify(_fields(row), row["signature"], now=row["now"]):
            raise LedgerError(
                f"approval ticket {ticket} fails its signature check: it was written or edited "
                "without the ledger's secret. Nothing was decided; ask for a new approval."
            )
        wanted = "approved" if approve else "denied"
        if only_if_pending and row["state"] != "pending":
            return request_of(row)
        if row["state"] == wanted:
            return request_of(row)  # a double click
        _check_transition(row)
        decided = {**row, "state": wanted, "decided_by": by}
        signature = signer.sign(_fields(decided))
        was = row["state"]
        rows.decide(conn, ticket, was=was, state=wanted, by=by, reason=reason, signature=signature)
        audit_rows.write(
            conn,
            actor=by,
            action=wanted,
            run_id=row["run_id"],
            tool=row["tool"],
            key=row["key"],
            ticket=ticket,
            reason=reason,
        )
        return request_of({**decided, "reason": reason})


def _check_transition(row: Mapping[str, Any]) -> None:
    ticket, state = row["ticket"], row["state"]
    if state == "spent":
        raise LedgerError(f"approval ticket {ticket} was already used: the action has run")
    if state == "denied":
        raise LedgerError(
            f"approval ticket {ticket} was denied by {row['decided_by']}; a no is final. If the "
            "agent asks again, a new ticket is opened."
        )
    if state == "pending" and row["expires_at"] <= row["now"]:  # yes or no alike
        raise LedgerError(
            f"approval ticket {ticket} expired; nothing was decided. The next call of the tool "
            "opens a new ticket."
        )


def request(
    ledger: LedgerCore,
    action: Action,
    *,
    approve: bool | None = None,
    by: str | None = None,
    reason: str | None = None,
) -> ApprovalRequest | None:
    """Open (or return the open) ticket for this exact call, without claiming or spending; a
    ticket that denied it, if one did. With ``approve``, a person's yes (or no, ``by`` whom) to
    exactly this call instead, e.g. an edited one, on a ticket of its own.

    For frameworks that decide, or ask, before the call reaches the ledger. None if it already
    ran (or is running): a repeat returns its result, and there is nothing to ask or decide.
    The ticket is open for the tool's ``approval_ttl``, else the ledger's.
    """
    if approve is not None:
        _check_by(by)
    ttl = action.options.approval_ttl or ledger.approval_ttl
    signer = ledger.signer()
    with ledger.store.tx() as conn:
        found = rows.action_state(conn, action.key)
        if found is not None and found[0] != "failed":
            return None
        attempt = 1 if found is None else found[1] + 1
        for row in rows.for_attempt(conn, action.key, attempt) if approve is None else ():
            if not _covers(row, action) or row["state"] == "spent":
                continue
            # A no stands (the gate will refuse): answered already, so nothing new is opened.
            live = row["state"] == "denied" or row["expires_at"] > row["now"]
            if live and signer.verify(_fields(row), row["signature"], now=row["now"]):
                return request_of(row)
        state = "pending" if approve is None else "approved" if approve else "denied"
        asked = asked_by(action, framework=True)
        return _new_ticket(
            conn, signer, action, attempt, ttl=ttl, state=state, by=by, reason=reason, asked=asked
        )


def superseded(ledger: LedgerCore, tickets: Sequence[ApprovalRequest]) -> set[str]:
    """Which of these tickets their run has asked about again since: a later ticket for the
    same tool, in any state (the agent moved on, often with other arguments)."""
    if not tickets:
        return set()
    last = rows.last_asked(ledger.store, sorted({t.run_id for t in tickets}))
    return {t.ticket for t in tickets if last.get((t.run_id, t.tool), 0.0) > t.requested_at}


def _check_by(by: str | None) -> None:
    if not isinstance(by, str) or not by.strip():
        raise LedgerError("say who decided: by='name' (it is recorded with the decision)")
