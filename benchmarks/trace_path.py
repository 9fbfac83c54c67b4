"""How much of the package one fresh ``@c4a.effect`` call passes through, beside the target.

    python benchmarks/trace_path.py [--postgres URL] [--list]

A sync tool is called in an open run on a new ledger (SQLite at ``durability="process"`` by
default, or a schema of its own on ``--postgres``, dropped afterwards), twenty times to warm up
(the ledger's connections, the run's state, each module's first-call work), then once more with
arguments it has not met, under ``sys.settrace``. Counted: the package's files and functions that
call entered (each function once, however often it ran), and the calls themselves; functions of
other packages (SQLAlchemy, the driver) are not counted, listeners of the package's own that they
call are. The target is issue 43's: at most 12 files and 45 functions.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

import call4agents as c4a

PACKAGE = Path(c4a.__file__).parent
TARGET_FILES, TARGET_FUNCTIONS = 12, 45
Function = tuple[str, str, int]  # file (inside the package), name, first line


@contextmanager
def ledger_at(postgres: str | None) -> Iterator[c4a.Ledger]:
    if postgres is None:
        with tempfile.TemporaryDirectory(prefix="c4a-trace-") as folder:
            ledger = c4a.Ledger(f"sqlite:///{folder}/ledger.db", durability="process")
            try:
                yield ledger
            finally:
                ledger.close()
        return
    schema = f"c4a_trace_{uuid.uuid4().hex[:12]}"
    ledger = c4a.Ledger(postgres, durability="process", schema=schema)
    try:
        yield ledger
    finally:
        ledger.close()
        import psycopg

        with psycopg.connect(postgres.replace("+psycopg", "", 1), autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def traced_fresh_call(ledger: c4a.Ledger) -> list[Function]:
    """The package's functions one fresh call enters, in order, one entry per call."""

    @c4a.effect(name="trace.send", ledger=ledger)
    def send(i: int, to: str = "bob@example.com") -> dict[str, Any]:
        return {"ok": True, "id": i}

    calls: list[Function] = []
    root = str(PACKAGE) + os.sep

    def tracer(frame: FrameType, event: str, _arg: Any) -> None:
        code = frame.f_code
        if event == "call" and code.co_filename.startswith(root):
            where = code.co_filename[len(root) :]
            calls.append((where, code.co_name, code.co_firstlineno))

    with c4a.run("trace-path", ledger=ledger):
        for i in range(20):
            send(i)
        sys.settrace(tracer)
        try:
            send(1_000)
        finally:
            sys.settrace(None)
    return calls


def report(calls: list[Function], *, listing: bool) -> None:
    functions = sorted(set(calls))
    files = Counter(where for where, _, _ in functions)
    print(f"files:     {len(files):3}   (target at most {TARGET_FILES})")
    print(f"functions: {len(functions):3}   (target at most {TARGET_FUNCTIONS})")
    print(f"calls:     {len(calls):3}")
    print()
    for where, count in sorted(files.items(), key=lambda item: (-item[1], item[0])):
        print(f"  {count:3}  {where}")
    if listing:
        print()
        for where, name, line in functions:
            print(f"  {where}:{line} {name}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--postgres", metavar="URL", help="trace on this PostgreSQL server")
    parser.add_argument("--list", action="store_true", help="list every function entered")
    args = parser.parse_args()
    with ledger_at(args.postgres) as ledger:
        calls = traced_fresh_call(ledger)
    report(calls, listing=args.list)


if __name__ == "__main__":
    main()
