"""What each durability level is, on each database, and what it survives of a crashed process.

A crash of the database server is in tests/postgres/test_server_crash.py, on a private server.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest
from sqlalchemy import text

import call4agents as c4a
from tests.conftest import Target

# Calls a tool until it is told to stop, printing each result as the call returns; then SIGKILL.
CHILD = """
import json, os, signal, sys
import call4agents as c4a
ledger = c4a.init(os.environ["C4A_TEST_URL"], schema=os.environ.get("C4A_TEST_SCHEMA") or None,
                  durability=sys.argv[1])

@c4a.effect(name="charge")
def charge(n: int) -> int:
    return n

with c4a.run("crash"):
    for n in range(int(sys.argv[2])):
        print(json.dumps(charge(n)), flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def _setting(ledger: c4a.Ledger) -> Any:
    query = "PRAGMA synchronous" if ledger.dialect == "sqlite" else "SHOW synchronous_commit"
    with ledger.engine.connect() as conn:
        return conn.execute(text(query)).scalar_one()


def test_each_durability_level_sets_the_database_so(target: Target) -> None:
    power, process = target.open(), target.open(durability="process")
    if power.dialect == "sqlite":
        assert (_setting(power), _setting(process)) == (2, 1)  # FULL, NORMAL
    else:
        assert (_setting(power), _setting(process)) == ("on", "off")


@pytest.mark.parametrize("durability", ["power", "process"])
def test_every_returned_result_survives_a_killed_process(target: Target, durability: str) -> None:
    target.open().close()  # the tables exist before the child starts
    done = subprocess.run(
        [sys.executable, "-c", CHILD, durability, "200"],
        env=target.env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == -9, done.stderr
    returned = [json.loads(line) for line in done.stdout.splitlines()]
    assert returned == list(range(200))
    records = target.open().effects("crash")
    assert sorted(r.result for r in records if r.state == "succeeded") == returned


def test_an_irreversible_tool_is_refused_on_a_process_ledger(target: Target) -> None:
    fast = target.open(durability="process")
    ran: list[int] = []

    def wire(amount: int) -> int:
        ran.append(amount)
        return amount

    with pytest.raises(c4a.ConfigurationError, match="durability='power'"):
        c4a.effect(kind="irreversible", ledger=fast, name="wire")(wire)
    c4a.init(fast)
    tool = c4a.effect(kind="irreversible", name="wire")(wire)  # the default ledger: at call
    with c4a.run("r"), pytest.raises(c4a.ConfigurationError, match="nothing was run"):
        tool(5)
    assert ran == []
    assert fast.effects("r") == []
    c4a.init(target.open())  # durability="power": the same tool runs
    with c4a.run("r"):
        assert tool(5) == 5
    assert ran == [5]
