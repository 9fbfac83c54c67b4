"""A worker process for the plain-Python approval races.

Usage: approval_worker.py FOLDER NAME AMOUNT. Waits until every worker named in FOLDER/workers is
ready, then calls ``refund("A-77", AMOUNT)`` in run "refund-77" (one action per order: the key
is the order) and prints "ran", "asked" or "denied". The tool appends to FOLDER/outbox, slowly,
so a second worker meets the first one's live lease.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import call4agents as c4a

folder, name, amount = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
c4a.init(os.environ["C4A_TEST_URL"], schema=os.environ.get("C4A_TEST_SCHEMA") or None, wait=30)


@c4a.effect(kind="irreversible", approval=True, key=lambda order, amount: order)
def refund(order: str, amount: int) -> str:
    time.sleep(0.3)
    with (folder / "outbox").open("a") as f:
        f.write(f"{order} {amount}\n")
    return f"refunded {amount}"


(folder / f"ready-{name}").touch()
while not all((folder / f"ready-{w}").exists() for w in (folder / "workers").read_text().split()):
    time.sleep(0.01)
with c4a.run("refund-77"):
    try:
        refund("A-77", amount)
        print("ran")
    except c4a.ApprovalRequired:
        print("asked")
    except c4a.ApprovalDenied:
        print("denied")
