"""One role in the SQLite re-open stress test; exits non-zero on the first error it meets.

    python reopen_child.py ROLE URL SECONDS RAN_FILE

worker  keeps a ledger open and opens it again every round (``c4a.init``), with threads opening
        it at once and a forked child opening it, running effects between;
writer  runs effects on one long-lived ledger;
reader  opens, reads and closes a ledger in a loop, as `call4agents doubt` does, and every few
        rounds runs the CLI itself in a process of its own.
Every execution of a tool appends its run id to RAN_FILE, outside the ledger.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import call4agents as c4a

role, url, seconds, ran_file = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]


@c4a.effect(kind="write")
def note(label: str) -> str:
    fd = os.open(ran_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, f"{label}\n".encode())
    finally:
        os.close(fd)
    return label


# Counted from here: the names above load the ledger's modules (import call4agents defers them).
deadline = time.monotonic() + seconds


def act(ledger: c4a.Ledger, label: str) -> None:
    # Twice: the second call must be a repeat served from the record.
    for _ in range(2):
        with c4a.run(label, ledger=ledger):
            assert note(label) == label


def open_in_threads(round_no: int) -> None:
    errors: list[BaseException] = []

    def one(i: int) -> None:
        try:
            with c4a.Ledger(url) as ledger:
                act(ledger, f"{role}-{os.getpid()}-{round_no}-t{i}")
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def open_after_fork(round_no: int) -> None:
    """A forked child (inheriting this process's open ledgers) opens the ledger and acts."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            with c4a.Ledger(url) as ledger:
                act(ledger, f"{role}-{os.getppid()}-{round_no}-fork")
            code = 0
        except BaseException as exc:
            print(f"forked child: {exc!r}", file=sys.stderr)
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit("a forked child failed to use the ledger")


def worker() -> None:
    held = c4a.init(url)  # stays open the whole time, as a worker's ledger does
    round_no = 0
    while time.monotonic() < deadline:
        again = c4a.init(url)  # "calling it again replaces the default ledger"
        act(again, f"worker-{round_no}")
        act(held, f"worker-held-{round_no}")
        open_in_threads(round_no)
        open_after_fork(round_no)
        again.close()
        round_no += 1


def writer() -> None:
    ledger = c4a.Ledger(url)
    round_no = 0
    while time.monotonic() < deadline:
        act(ledger, f"writer-{os.getpid()}-{round_no}")
        round_no += 1
    ledger.close()


def reader() -> None:
    round_no = 0
    while time.monotonic() < deadline:
        if round_no % 20 == 0:
            cli = [
                sys.executable,
                "-c",
                "import sys; from call4agents.facade.cli import main; sys.exit(main())",
                "doubt",
                "--url",
                url,
            ]
            done = subprocess.run(cli, capture_output=True, text=True, timeout=60, check=False)
            if done.returncode != 0:
                raise SystemExit(f"call4agents doubt failed: {done.stderr}")
        with c4a.Ledger(url) as ledger:
            ledger.in_doubt()
            ledger.runs()
        round_no += 1


{"worker": worker, "writer": writer, "reader": reader}[role]()
print("ok")
