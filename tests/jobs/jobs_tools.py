"""The job the worker tests run, shared by every engine's test app: send one email, counted in a
file outside the ledger, and a crash where the test asks for one.

Configured from the environment (the test sets it before starting a worker):
``C4A_JOBS_DIR`` holds the counts and crash markers; ``C4A_JOBS_LEDGER`` is the ledger URL (empty:
run bare, without Call4Agents) and ``C4A_JOBS_SCHEMA`` its PostgreSQL schema.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import call4agents as c4a

DIR = Path(os.environ.get("C4A_JOBS_DIR", "."))
LEDGER_URL = os.environ.get("C4A_JOBS_LEDGER", "")
SCHEMA = os.environ.get("C4A_JOBS_SCHEMA") or None
ONCE = bool(LEDGER_URL)

# Where a job may be killed, once per test: before the email went out, after it went out but
# before the tool returned (in doubt), or after the tool returned (recorded).
BEFORE_SEND, INSIDE, AFTER = "before-send", "inside", "after"


def ledger_setting() -> str | c4a.Ledger:
    """The URL alone (each worker process opens it), or an open ledger in its test schema."""
    return c4a.Ledger(LEDGER_URL, schema=SCHEMA) if SCHEMA else LEDGER_URL


def note(name: str, line: str) -> None:
    with (DIR / name).open("a") as file:
        file.write(line + "\n")


def crash_once(where: str) -> None:
    """SIGKILL this process the first time a job reaches ``where``, if the test asked for it by
    writing ``where`` into the folder's ``crash`` file (not an argument: a job sent again has the
    same arguments, and so the same action key)."""
    asked = DIR / "crash"
    marker = DIR / f"crashed-{where}"
    if asked.exists() and asked.read_text() == where and not marker.exists():
        marker.touch()
        os.kill(os.getpid(), signal.SIGKILL)


def _send_email(to: str, pause: float) -> str:
    crash_once(BEFORE_SEND)
    time.sleep(pause)  # a slow provider, so racing copies of the job overlap
    note("emails", to)
    crash_once(INSIDE)
    return f"sent to {to}"


send_email = c4a.effect(name="send_email")(_send_email) if ONCE else _send_email


def job(to: str, pause: float = 0.0) -> str:
    """The body of every engine's job."""
    note("starts", to)
    try:
        result = send_email(to, pause)
        crash_once(AFTER)
    finally:
        note("ends", to)
    return result
