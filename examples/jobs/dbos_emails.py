"""A DBOS workflow whose step emails Bob once, however often DBOS runs the step again.

Offline: DBOS keeps its system database in SQLite (dbos.sqlite), the ledger is
.c4a/ledger.db, both in the current folder. When a process dies inside a step, DBOS recovers
the workflow and runs that step again from its start; here the step is simply called again in
the workflow's run, as recovery would.
"""

from __future__ import annotations

from dbos import DBOS, SetWorkflowID

import call4agents as c4a
from call4agents_jobs.dbos import OnceOnly

DBOS(
    config={"name": "emails", "system_database_url": "sqlite:///dbos.sqlite", "log_level": "ERROR"}
)
c4a.init()  # sqlite:///.c4a/ledger.db in the current folder, or $CALL4AGENTS_URL
outbox: list[str] = []


@c4a.effect
def send_email(to: str, body: str) -> str:
    outbox.append(to)  # stands in for a mail provider's API call
    return f"sent to {to} (idempotency key {c4a.current().idempotency_key[:12]}...)"


@DBOS.step()
def send_step(to: str) -> str:
    return send_email(to, "Your refund is on its way")


@DBOS.workflow()
@OnceOnly()
def notify(to: str) -> str:
    return send_step(to)


DBOS.launch()
with SetWorkflowID("refund-1234"):
    print("workflow:", notify("bob@example.com"))
with c4a.run("dbos-refund-1234"):  # the step again, in the workflow's run
    print("step again:", send_step("bob@example.com"))
print("emails sent by this process:", len(outbox))
DBOS.destroy()
