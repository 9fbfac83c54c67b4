"""A worker process for the PostgreSQL tests: one ledger, one tool, a list of keys.

Usage: worker.py RUN_ID OUTBOX KEY [KEY ...]

Environment: C4A_TEST_URL, C4A_TEST_SCHEMA; LEASE and WAIT (seconds); TOOL_SECONDS (how long the
tool works before it delivers); DURABILITY (the ledger's); RETRY_IN_DOUBT=1 (the tool re-sends
under its idempotency key and the "provider" drops what it has seen); GATE=path (start only once
that file exists, so that many workers start together); STARTED=path (the tool creates it when it
starts); OWNER_HOST=name (its leases name that host, as a worker of another machine would).

The provider is the OUTBOX file: one fsynced JSON line per delivery, outside the ledger.
Prints one JSON document: results and errors per key, how many statements read the effects table,
this process's clock and the database's. Exit 0 when every key has a result, 1 otherwise.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

from sqlalchemy import event

import call4agents as c4a

run_id, outbox, keys = sys.argv[1], Path(sys.argv[2]), sys.argv[3:]
retry = os.environ.get("RETRY_IN_DOUBT") == "1"
tool_seconds = float(os.environ.get("TOOL_SECONDS", "0"))
gate, started = os.environ.get("GATE"), os.environ.get("STARTED")

if os.environ.get("OWNER_HOST"):
    # Seen from the test, this worker is a process of another machine: a pause is judged by its
    # lease, since no process table can tell whether it is alive.
    from dataclasses import replace

    from call4agents.engine import _owner

    elsewhere = replace(_owner.me(), host=os.environ["OWNER_HOST"])
    _owner._me = (os.getpid(), elsewhere, str(elsewhere))

# Sleeping with Event.wait, not time.sleep: under libfaketime (the clock-skew tests) Python's
# time.sleep fails with EINVAL (clock_nanosleep with an absolute deadline), other waits work.
pause = threading.Event()
if gate:
    while not Path(gate).exists():
        pause.wait(0.005)

ledger = c4a.init(
    os.environ["C4A_TEST_URL"],
    schema=os.environ.get("C4A_TEST_SCHEMA") or None,
    lease=float(os.environ.get("LEASE", "30")),
    wait=float(os.environ.get("WAIT", "60")),
    durability=os.environ.get("DURABILITY", "power"),  # type: ignore[arg-type]
)
reads = 0


def _count(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
    global reads
    if statement.lstrip().startswith("SELECT") and "c4a_effects" in statement:
        reads += 1


if os.environ.get("COUNT_READS") == "1":
    # Only when asked: the fleet runs as real workers do, with no listener of ours.
    event.listen(ledger.engine, "before_cursor_execute", _count)


def deliver(to: str, key: str, attempt: int) -> None:
    seen = outbox.read_text().splitlines() if retry and outbox.exists() else []
    if any(json.loads(line)["key"] == key for line in seen):
        return  # the provider drops a duplicate of an idempotency key it has seen
    with outbox.open("a") as f:
        f.write(json.dumps({"to": to, "key": key, "attempt": attempt, "pid": os.getpid()}) + "\n")
        f.flush()
        os.fsync(f.fileno())


@c4a.effect(name="send_email", retry_in_doubt=retry)
def send_email(to: str) -> dict[str, Any]:
    ctx = c4a.current()
    if started:
        Path(started).touch()
    pause.wait(tool_seconds)
    deliver(to, ctx.idempotency_key, ctx.attempt)
    return {"to": to, "pid": os.getpid(), "attempt": ctx.attempt}


results: dict[str, Any] = {}
errors: dict[str, str] = {}
with c4a.run(run_id):
    for to in keys:
        try:
            results[to] = send_email(to)
        except c4a.Call4AgentsError as exc:
            errors[to] = f"{type(exc).__name__}: {exc}"
print(
    json.dumps(
        {
            "results": results,
            "errors": errors,
            "reads": reads,
            "pid": os.getpid(),
            "local_clock": time.time(),
            "db_clock": ledger.store.now(),
        }
    )
)
sys.exit(0 if not errors else 1)
