"""A DBOS app whose workflow sends one email from a step, run as a child process.

``dbos_child.py SYSDB EMAILS MODE STEP``: MODE ``bare`` or ``once`` (the workflow under
``OnceOnly``, the email an ``@c4a.effect`` tool), or ``once-no-retries`` (a step DBOS does not
retry). STEP ``after`` starts the workflow and dies by
SIGKILL in the step once the tool returned; ``inside`` dies inside the tool, after the email went
out; ``before`` dies inside the tool before it went out. ``recover`` launches DBOS, which
recovers the workflow the dead process left pending, and prints its outcome as JSON. Each error
the step meets before DBOS retries it is noted in ``EMAILS.errors``. The ledger is
``$C4A_TEST_URL``: a tool's owner killed on this machine is known dead at once, so the recovery
finds the action in doubt without waiting for a lease.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

from dbos import DBOS, SetWorkflowID

import call4agents as c4a
from call4agents_jobs.dbos import OnceOnly

SYSDB, EMAILS, MODE = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
STEP = sys.argv[4] if len(sys.argv) > 4 else "recover"
KILL = STEP if STEP in ("before", "inside", "after") else None
WORKFLOW = "notify-1"

DBOS(
    config={
        "name": "c4a-test",
        "system_database_url": SYSDB,
        "application_version": "1",
        "log_level": "ERROR",
    }
)
c4a.init(os.environ["C4A_TEST_URL"])


def deliver(to: str) -> str:
    if KILL == "before":
        os.kill(os.getpid(), signal.SIGKILL)
    with EMAILS.open("a") as f:
        f.write(to + "\n")
    if KILL == "inside":
        os.kill(os.getpid(), signal.SIGKILL)
    return f"sent to {to}"


ONCE = MODE in ("once", "once-no-retries")
send_email = c4a.effect(deliver) if ONCE else deliver
once = OnceOnly() if ONCE else (lambda fn: fn)


def seen(error: BaseException) -> bool:
    """DBOS asks before each retry of the step: note the error where the test reads it."""
    found = {"error": type(error).__name__, "message": str(error), "key": getattr(error, "key", "")}
    with Path(str(EMAILS) + ".errors").open("a") as f:
        f.write(json.dumps(found) + "\n")
    return True


# A step with a tool retries while its action is in doubt: a person's verdict lets it finish.
@DBOS.step(
    retries_allowed=MODE != "once-no-retries",
    interval_seconds=0.2,
    backoff_rate=1.0,
    max_attempts=100_000,
    should_retry=seen,
)
def send_step(to: str) -> str:
    sent = send_email(to)
    if KILL == "after":
        os.kill(os.getpid(), signal.SIGKILL)
    return sent


@DBOS.workflow()
@once
def notify(to: str) -> str:
    return send_step(to)


DBOS.launch()
if KILL:  # the first delivery: this process dies in the step
    with SetWorkflowID(WORKFLOW):
        notify("bob@example.com")
    sys.exit("the workflow returned although its process was to be killed")
# DBOS.launch() recovered the workflow the dead process left pending.
try:
    outcome = {"result": DBOS.retrieve_workflow(WORKFLOW).get_result()}
except Exception as exc:
    outcome = {"error": type(exc).__name__, "message": str(exc), "key": getattr(exc, "key", None)}
print(json.dumps(outcome))
DBOS.destroy()
