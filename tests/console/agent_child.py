"""A plain-Python agent for the console's browser tests, run as its own process.

Usage: agent_child.py RUN_ID TOOL COUNT_FILE [MODE]. TOOL is "refund" (needs a person's yes) or
"email" (MODE "timeout": the provider does not answer, so the action falls in doubt). Each real
execution appends a line to COUNT_FILE, outside the ledger. Prints one JSON line: what happened.
Exit 3 while waiting for a person, 4 when denied. The ledger comes from C4A_TEST_URL/_SCHEMA.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import call4agents as c4a

run_id, tool, count_file = sys.argv[1], sys.argv[2], Path(sys.argv[3])
mode = sys.argv[4] if len(sys.argv) > 4 else "ok"
c4a.init(os.environ["C4A_TEST_URL"], schema=os.environ.get("C4A_TEST_SCHEMA") or None)


def executed(what: str) -> None:
    with count_file.open("a") as f:
        f.write(what + "\n")


@c4a.effect(name="refund", kind="irreversible", approval=True, redact=("card",))
def refund(order: str, amount: int, card: str) -> dict[str, str]:
    executed(f"refund {order} {amount}")
    return {"refund_id": f"rf-{order}"}


@c4a.effect(name="open_case", kind="write")
def open_case(order: str) -> dict[str, str]:
    return {"case": f"C-{order}", "status": "refund requested by the customer"}


@c4a.effect(name="send_email", kind="write")
def send_email(to: str, subject: str) -> dict[str, str]:
    executed(f"email {to}")
    if mode == "timeout":
        raise TimeoutError("the mail provider did not answer")
    return {"id": "msg-new"}


try:
    with c4a.run(run_id):
        if tool == "refund":
            open_case("A-17")  # done before the tool that waits for a person
            result = refund("A-17", 40, card="4242-4242-4242-4242")
        else:
            result = send_email("bob@example.com", "Your refund")
    print(json.dumps({"result": result}))
except c4a.ApprovalRequired as exc:
    print(json.dumps({"waiting": exc.request.ticket if exc.request else None}))
    sys.exit(3)
except c4a.ApprovalDenied as exc:
    print(json.dumps({"denied": str(exc)}))
    sys.exit(4)
except TimeoutError as exc:
    print(json.dumps({"timeout": str(exc)}))
    sys.exit(5)
