"""A child agent for the crash and race tests: one tool call, killed at a chosen moment.

Usage: agent_child.py POINT RUN_ID OUTBOX [KEY ...]

The "provider" is the OUTBOX file: one line per delivered email, written and fsynced by the tool,
outside the ledger. With RETRY_IN_DOUBT=1 the provider drops a line whose idempotency key it has
seen, as Stripe-like APIs do, and the tool is declared retry_in_doubt=True.
With APPROVAL=1 the tool needs a person's yes. With HOLD=DIR the tool, once running, creates
DIR/running and waits for DIR/release: a test can act while a call is surely mid-flight.
With OWNER_HOST=name its leases name that host.
Exit codes: 0 done, 3 EffectInDoubt, 4 EffectInProgress, 5 ApprovalRequired; SIGKILL at POINT.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import call4agents as c4a

point, run_id, outbox = sys.argv[1], sys.argv[2], Path(sys.argv[3])
keys = sys.argv[4:] or ["bob@example.com"]
retry = os.environ.get("RETRY_IN_DOUBT") == "1"
tool_seconds = float(os.environ.get("TOOL_SECONDS", "0"))
approval = os.environ.get("APPROVAL") == "1"

if os.environ.get("OWNER_HOST"):
    # Seen from the test, this worker is a process of another machine: a pause is judged by its
    # lease, since no process table can tell whether it is alive.
    from dataclasses import replace

    from call4agents.engine import _owner

    elsewhere = replace(_owner.me(), host=os.environ["OWNER_HOST"])
    _owner._me = (os.getpid(), elsewhere, str(elsewhere))
ledger = c4a.init(
    os.environ["C4A_TEST_URL"],
    schema=os.environ.get("C4A_TEST_SCHEMA") or None,
    lease=float(os.environ.get("LEASE", "600")),  # long: a resume must not wait it out
    wait=float(os.environ.get("WAIT", "30")),
)


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


if point == "after_tool_before_result":
    # The exact moment between the tool's return and the result's write. The store is wrapped,
    # not the engine: an engine listener would send every statement the long way, and these
    # children must crash on the path real workers take.
    write_outcome = ledger.store.finish

    def _finish(key: str, attempt: int, *, state: str, **rest: Any) -> bool:
        if state == "succeeded":
            die()
        return write_outcome(key, attempt, state=state, **rest)  # type: ignore[arg-type]

    ledger.store.finish = _finish  # type: ignore[method-assign]


def deliver(to: str, key: str) -> bool:
    seen = outbox.read_text().splitlines() if outbox.exists() else []
    if retry and any(json.loads(line)["key"] == key for line in seen):
        return False  # the provider drops the duplicate
    with outbox.open("a") as f:
        f.write(json.dumps({"to": to, "key": key, "pid": os.getpid()}) + "\n")
        f.flush()
        os.fsync(f.fileno())
    return True


def hold_until_released() -> None:
    """With HOLD=DIR: say the tool is running (DIR/running), then wait for DIR/release."""
    if not os.environ.get("HOLD"):
        return
    hold = Path(os.environ["HOLD"])
    (hold / "running").touch()
    deadline = time.monotonic() + 120  # a test that never releases still ends
    while not (hold / "release").exists() and time.monotonic() < deadline:
        time.sleep(0.01)


@c4a.effect(name="send_email", retry_in_doubt=retry, approval=approval)
def send_email(to: str) -> dict[str, Any]:
    ctx = c4a.current()
    if point == "after_intent":
        die()
    time.sleep(tool_seconds)
    hold_until_released()
    deliver(to, ctx.idempotency_key)
    if point == "inside_tool":
        die()
    return {"delivered_to": to, "attempt": ctx.attempt, "pid": os.getpid()}


results = []
try:
    with c4a.run(run_id):
        for to in keys:
            if point == "before_intent":
                die()
            results.append(send_email(to))
            if point == "after_result":
                die()
except c4a.EffectInDoubt as exc:
    print(json.dumps({"in_doubt": str(exc)}))
    sys.exit(3)
except c4a.EffectInProgress as exc:
    print(json.dumps({"in_progress": str(exc)}))
    sys.exit(4)
except c4a.ApprovalRequired as exc:
    print(json.dumps({"approval": exc.request.as_dict()}))
    sys.exit(5)
print(json.dumps({"results": results}))
