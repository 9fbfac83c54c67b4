"""Forks while a write transaction is open, then uses the ledger in the child.

    python fork_gate_child.py URL CASE

other   another thread holds the write lock for half a second when the main thread forks; the
        child opens the ledger and writes (with a 3 s busy timeout: without the fork gate its
        copy of the lock table says the lock is still held, and it fails after 3 s).
own     the forking thread itself is inside a write transaction (the fork must not wait for
        itself); the child only exits.
Prints "ok" and exits 0 when the child succeeded.
"""

from __future__ import annotations

import os
import sys
import threading
import time

import call4agents as c4a
from call4agents.storage import sqlite_tx

url, case = sys.argv[1], sys.argv[2]
sqlite_tx.LIMIT = 120.0  # longer than the test waits: a fork that waits for itself fails it
ledger = c4a.Ledger(url)


def child_writes() -> int:
    try:
        with c4a.Ledger(url, busy_timeout=3) as child, child.store.tx():
            pass
    except BaseException as exc:  # reported to the test
        print(f"child: {exc!r}", file=sys.stderr, flush=True)
        return 1
    return 0


def fork(work: object) -> int:
    pid = os.fork()
    if pid == 0:
        os._exit(work() if callable(work) else 0)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


if case == "other":
    held = threading.Event()

    def hold() -> None:
        with ledger.store.tx():
            held.set()
            time.sleep(0.5)

    holder = threading.Thread(target=hold)
    holder.start()
    held.wait()
    code = fork(child_writes)
    holder.join()
else:
    with ledger.store.tx():
        code = fork(None)
ledger.close()
print("ok" if code == 0 else f"child exit {code}")
sys.exit(code)
