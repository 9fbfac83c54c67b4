"""Connections: one pool per ledger, reused; async tools keep the database off the event loop;
a forked child never touches its parent's connections; a waiter is woken, not polling."""

from __future__ import annotations

import asyncio
import json
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy import event
from sqlalchemy.pool import QueuePool

import call4agents as c4a
from tests.conftest import Target, run_child
from tests.postgres.helpers import plain


def test_one_pool_per_ledger_reused_across_actions(pg_target: Target) -> None:
    first, second = pg_target.open(), pg_target.open()
    assert isinstance(first.engine.pool, QueuePool)
    assert first.engine.pool is not second.engine.pool
    opened: list[int] = []
    event.listen(first.engine, "connect", lambda *_: opened.append(1))

    @c4a.effect(name="send_email", ledger=first)
    def send_email(to: str) -> str:
        return to

    with c4a.run("pool", ledger=first):
        for i in range(30):
            send_email(f"user{i}@example.com")
    assert len(opened) <= 1  # thirty actions, sixty transactions, one connection at most


def _record_threads(ledger: c4a.Ledger, seen: set[int]) -> None:
    def note(*_: Any) -> None:
        seen.add(threading.get_ident())

    event.listen(ledger.engine, "before_cursor_execute", note)
    event.listen(ledger.engine, "checkout", note)
    event.listen(ledger.engine, "connect", note)


def test_async_tools_never_touch_the_database_on_the_event_loop(pg_target: Target) -> None:
    ledger, view = pg_target.open(lease=5, wait=10), pg_target.open(lease=5, wait=10)
    seen: set[int] = set()
    _record_threads(ledger, seen)
    _record_threads(view, seen)
    calls: list[str] = []

    @c4a.effect(name="send_email")
    async def send_email(to: str) -> str:
        calls.append(to)
        await asyncio.sleep(0.3)
        if to.startswith("fail"):
            raise ValueError("refused by the provider")
        if to.startswith("timeout"):
            raise TimeoutError("no answer")
        return f"sent to {to}"

    async def check(to: str) -> c4a.Happened:
        return c4a.Happened(f"found {to}")

    @c4a.effect(name="send_email", check=check)
    async def send_checked(to: str) -> str:
        raise AssertionError("settled by check=, never run")

    @c4a.effect(name="charge", redact=("card",))
    async def charge(amount: int, card: str) -> str:
        return f"charged {amount}"

    async def scenario() -> int:
        async with c4a.run("loop", ledger=ledger):
            # Two callers at once: one runs it, the other waits for its result.
            both = await asyncio.gather(send_email("bob@x.org"), send_email("bob@x.org"))
            assert both == ["sent to bob@x.org"] * 2
            with pytest.raises(ValueError):
                await send_email("fail@x.org")
            with pytest.raises(TimeoutError):
                await send_email("timeout@x.org")
        async with c4a.run("loop", ledger=view):  # another process's view: no cache
            assert await send_email("bob@x.org") == "sent to bob@x.org"
            assert await send_checked("timeout@x.org") == "found timeout@x.org"
            # A redacted value is keyed by the ledger's salt, which must not be read here either.
            assert await charge(5, "4242-4242-4242-4242") == "charged 5"
        budget = c4a.Budget(max_tool_calls=5, deadline=600)
        async with c4a.run("loop-budget", ledger=ledger, budget=budget):
            assert await send_email("carol@x.org") == "sent to carol@x.org"
        # A plain `with` in a coroutine, as framework hooks enter runs: its clock starts too.
        with c4a.run("loop-budget-sync", ledger=ledger, budget=budget):
            assert await send_email("dave@x.org") == "sent to dave@x.org"
        return threading.get_ident()

    loop_thread = asyncio.run(scenario())
    assert seen, "no database work was observed"
    assert loop_thread not in seen
    assert calls == ["bob@x.org", "fail@x.org", "timeout@x.org", "carol@x.org", "dave@x.org"]


def test_a_crowd_of_identical_async_calls_gets_one_result(pg_target: Target) -> None:
    ledger = pg_target.open(lease=5, wait=3)
    calls: list[int] = []

    @c4a.effect(name="slow", ledger=ledger)
    async def slow(n: int) -> int:
        calls.append(n)
        await asyncio.sleep(0.5)
        return n

    async def crowd() -> list[Any]:
        async with c4a.run("crowd", ledger=ledger):
            return await asyncio.gather(*[slow(1) for _ in range(16)], return_exceptions=True)

    assert asyncio.run(crowd()) == [1] * 16
    assert calls == [1]


def test_waiter_is_woken_by_the_outcome(pg_target: Target) -> None:
    ledger = pg_target.open(lease=60, wait=60)
    reads: dict[int, int] = {}

    @event.listens_for(ledger.engine, "before_cursor_execute")
    def _count(conn: Any, cursor: Any, statement: str, *rest: Any) -> None:
        if statement.lstrip().startswith("SELECT") and "c4a_effects" in statement:
            me = threading.get_ident()
            reads[me] = reads.get(me, 0) + 1

    inside, go = threading.Event(), threading.Event()

    @c4a.effect(name="send_email", ledger=ledger)
    def send_email(to: str) -> str:
        inside.set()
        go.wait(30)
        return f"sent to {to}"

    results: dict[str, str] = {}

    def call(who: str) -> None:
        with c4a.run("woken", ledger=ledger):
            results[who] = send_email("bob@example.com")

    owner = threading.Thread(target=call, args=("owner",))
    owner.start()
    assert inside.wait(30)
    waiter = threading.Thread(target=call, args=("waiter",))
    waiter.start()
    time.sleep(3)  # long enough for polling every quarter second to read a dozen times
    go.set()
    owner.join(30)
    waiter.join(30)
    assert results == {"owner": "sent to bob@example.com", "waiter": "sent to bob@example.com"}
    assert waiter.ident is not None
    # Its claim, a few quick polls while the listener connects, one read once promised a
    # wake-up, and one once woken.
    assert reads[waiter.ident] <= 8, reads


FORKED = textwrap.dedent(
    """
    import json, os, sys
    import call4agents as c4a

    ledger = c4a.init(os.environ["C4A_TEST_URL"], schema=os.environ["C4A_TEST_SCHEMA"])

    @c4a.effect(name="send_email")
    def send_email(to):
        return {"to": to, "pid": os.getpid()}

    def backend():
        with ledger.engine.connect() as conn:
            return conn.exec_driver_sql("SELECT pg_backend_pid()").scalar()

    with c4a.run("fork"):
        send_email("parent-before@example.com")
    before = backend()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its own connections, never the parent's pooled ones
        os.close(r)
        try:
            with c4a.run("fork"):
                out = {"result": send_email("child@example.com"), "backend": backend()}
        except BaseException as exc:
            out = {"error": repr(exc)}
        os.write(w, json.dumps(out).encode())
        os._exit(0)
    os.close(w)
    child = json.loads(os.read(r, 1 << 16))
    os.waitpid(pid, 0)
    with c4a.run("fork"):
        after = send_email("parent-after@example.com")
    print(json.dumps({"child": child, "child_pid": pid, "before": before,
                      "after": backend(), "result": after}))
    """
)


def test_forked_child_opens_its_own_connections(pg_target: Target, tmp_path: Path) -> None:
    script = tmp_path / "forked.py"
    script.write_text(FORKED)
    done = run_child(script, env=pg_target.env())
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert "error" not in out["child"], out["child"]
    assert out["child"]["result"]["pid"] == out["child_pid"]
    assert out["child"]["backend"] != out["before"]  # a connection of its own
    assert out["after"] == out["before"]  # the parent's connection survived the child
    assert out["result"]["to"] == "parent-after@example.com"
    records = pg_target.open().effects("fork")
    assert [r.state for r in records] == ["succeeded"] * 3


def test_outcomes_notify_only_when_someone_waits(pg_target: Target) -> None:
    """NOTIFY serialises commits server-wide, so a finished action sends one only to a waiter."""
    ledger = pg_target.open(lease=60, wait=60)
    inside, go = threading.Event(), threading.Event()

    @c4a.effect(name="send_email", ledger=ledger)
    def send_email(to: str) -> str:
        if to == "slow@example.com":
            inside.set()
            go.wait(30)
        return f"sent to {to}"

    channel = f"c4a_{pg_target.schema}"  # the ledger's channel: c4a_ and the schema name
    with psycopg.connect(plain(pg_target.url), autocommit=True) as listening:
        listening.execute(f'LISTEN "{channel}"')
        with c4a.run("quiet", ledger=ledger):
            for i in range(20):
                send_email(f"user{i}@example.com")
        assert list(listening.notifies(timeout=0.5)) == []  # nobody waited: nothing sent

        def call() -> None:
            with c4a.run("quiet", ledger=ledger):
                send_email("slow@example.com")

        owner, waiter = threading.Thread(target=call), threading.Thread(target=call)
        owner.start()
        assert inside.wait(30)
        waiter.start()
        time.sleep(1)  # the waiter registers and is promised a wake-up
        go.set()
        owner.join(30)
        waiter.join(30)
        sent = list(listening.notifies(timeout=2, stop_after=1))
    assert [n.channel for n in sent] == [channel]
    assert ledger.effects("quiet")[-1].key == sent[0].payload


def test_connections_give_up_on_a_dead_network_in_bounded_time(pg_target: Target) -> None:
    # Keepalives find a dead peer while a connection idles; a statement already sent into a
    # dead network is bounded by tcp_user_timeout. A URL's own setting wins.
    ledger = pg_target.open()
    with ledger.engine.connect() as conn:
        settings = conn.connection.dbapi_connection.info.get_parameters()  # type: ignore[union-attr]
    assert (settings["tcp_user_timeout"], settings["keepalives_idle"]) == ("30000", "30")
    mine = c4a.Ledger(pg_target.url + "?tcp_user_timeout=5000", schema=pg_target.schema)
    pg_target.opened.append(mine)
    with mine.engine.connect() as conn:
        settings = conn.connection.dbapi_connection.info.get_parameters()  # type: ignore[union-attr]
    assert settings["tcp_user_timeout"] == "5000"


def test_sessions_run_without_the_jit_compiler(pg_target: Target) -> None:
    # A statement estimated above jit_above_cost (one lookup per waiting ticket) spent longer
    # compiling than running; every session of a ledger, including one the pool opens later,
    # has JIT off, and the setting survives the pool's rollback on check-in.
    ledger = pg_target.open()
    for _ in range(2):
        with ledger.engine.connect() as first, ledger.engine.connect() as second:
            for conn in (first, second):
                assert conn.exec_driver_sql("SHOW jit").scalar_one() == "off"
