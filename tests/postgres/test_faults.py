"""Database faults at each step of an action: a proxy cuts the connection, or the server restarts.

What must hold at every step: the tool never runs without a durable intent; a result that could
not be written is retried for a bounded time, else the action is left in doubt with a clear error
and is never run again; the same process carries on once the database is back.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from sqlalchemy import event
from sqlalchemy.engine import make_url

import call4agents as c4a
from tests.conftest import Target
from tests.postgres.helpers import unavailable
from tests.postgres.proxy import Proxy


@pytest.fixture
def proxy(pg_target: Target) -> Iterator[Proxy]:
    with Proxy(upstream_port=make_url(pg_target.url).port or 5432) as found:
        yield found


class Tool:
    """A send_email tool that counts its executions; ``during`` runs inside it, once."""

    def __init__(self, ledger: c4a.Ledger) -> None:
        self.sent: list[str] = []
        self.during: Callable[[], None] | None = None

        @c4a.effect(name="send_email", ledger=ledger)
        def send_email(to: str) -> dict[str, Any]:
            if self.during is not None:
                step, self.during = self.during, None
                step()
            self.sent.append(to)
            return {"to": to, "n": len(self.sent)}

        self.send = send_email


def through(proxy: Proxy, target: Target, **settings: Any) -> c4a.Ledger:
    """A ledger whose every connection passes through the proxy."""
    ledger = c4a.Ledger(proxy.url(target.url), schema=target.schema, **settings)
    target.opened.append(ledger)
    return ledger


def on_statement(ledger: c4a.Ledger, match: Callable[[str, Any], bool], act: Callable[[], None]):
    """Run ``act`` once, just before the first statement that ``match``es is sent."""
    armed = [True]

    @event.listens_for(ledger.engine, "before_cursor_execute")
    def _before(conn: Any, cursor: Any, statement: str, params: Any, *rest: Any) -> None:
        if armed[0] and match(statement, params):
            armed[0] = False
            act()

    return _before


def writes_result(statement: str, params: Any) -> bool:
    return statement.lstrip().startswith("UPDATE") and "'succeeded'" in repr(params)


def writes_intent(statement: str, params: Any) -> bool:
    return "INSERT INTO" in statement and "c4a_effects" in statement  # alone, or the claim's


def lose_the_acknowledgement(proxy: Proxy) -> None:
    """The COMMIT reaches the server; its answer never comes back; then the line drops."""
    proxy.swallow()

    def drop() -> None:
        proxy.down()
        proxy.up_after(1.0)

    threading.Timer(0.5, drop).start()


def test_database_away_before_the_intent(pg_target: Target, proxy: Proxy) -> None:
    ledger = through(proxy, pg_target, lease=5, wait=5)
    tool = Tool(ledger)
    with c4a.run("before", ledger=ledger):
        tool.send("warm@example.com")  # the pool holds a connection that is about to die
        proxy.down()
        with pytest.raises(c4a.LedgerError, match="the ledger database failed"):
            tool.send("bob@example.com")
        assert tool.sent == ["warm@example.com"]  # no intent, so the tool did not run
        proxy.accept()
        assert tool.send("bob@example.com") == {"to": "bob@example.com", "n": 2}
    assert tool.sent == ["warm@example.com", "bob@example.com"]


def test_database_away_between_intent_and_tool(pg_target: Target, proxy: Proxy) -> None:
    ledger = through(proxy, pg_target, lease=5, wait=5)
    tool = Tool(ledger)
    tool.during = lambda: (proxy.down(), proxy.up_after(1.0))
    with c4a.run("between", ledger=ledger):
        result = tool.send("bob@example.com")  # the result write waits for the database
    assert result == {"to": "bob@example.com", "n": 1}
    [record] = pg_target.open().effects("between")
    assert (record.state, record.attempt, record.result, record.evidence) == (
        "succeeded",
        1,
        result,
        [],
    )


def test_connection_cut_as_the_result_is_written(pg_target: Target, proxy: Proxy) -> None:
    ledger = through(proxy, pg_target, lease=5, wait=5)
    tool = Tool(ledger)
    on_statement(ledger, writes_result, lambda: (proxy.down(), proxy.up_after(1.0)))
    with c4a.run("write", ledger=ledger):
        assert tool.send("bob@example.com") == {"to": "bob@example.com", "n": 1}
    fresh = pg_target.open()  # a new process's view: the result is in the database
    with c4a.run("write", ledger=fresh):
        again = Tool(fresh)
        assert again.send("bob@example.com") == {"to": "bob@example.com", "n": 1}
        assert again.sent == []
    assert tool.sent == ["bob@example.com"]


def test_result_committed_but_acknowledgement_lost(pg_target: Target, proxy: Proxy) -> None:
    ledger = through(proxy, pg_target, lease=5, wait=5)
    tool = Tool(ledger)
    direct = pg_target.open()
    seen_before_the_cut: list[str] = []

    def lose_it() -> None:
        proxy.swallow()  # the result's UPDATE reaches the server; its answer never comes back

        def drop() -> None:
            seen_before_the_cut.extend(r.state for r in direct.effects("ack"))
            proxy.down()
            proxy.up_after(1.0)

        threading.Timer(0.5, drop).start()

    on_statement(ledger, writes_result, lose_it)
    with c4a.run("ack", ledger=ledger):
        assert tool.send("bob@example.com") == {"to": "bob@example.com", "n": 1}
    assert seen_before_the_cut == ["succeeded"]  # it was committed, only the answer was lost
    [record] = direct.effects("ack")
    # The retry recognised its own committed write: no late "evidence" of itself.
    assert (record.state, record.attempt, record.evidence) == ("succeeded", 1, [])
    assert proxy.opened > 2  # it did reconnect


def test_cut_armed_in_the_tool_as_the_result_is_written(pg_target: Target, proxy: Proxy) -> None:
    # No engine listener here, as in every real worker; the cut is armed from inside the tool.
    ledger = through(proxy, pg_target, lease=5, wait=5)
    tool = Tool(ledger)
    tool.during = lambda: (proxy.cut_at_next_request(), proxy.refuse(), proxy.up_after(1.0))
    with c4a.run("armed-write", ledger=ledger):
        assert tool.send("bob@example.com") == {"to": "bob@example.com", "n": 1}
    [record] = pg_target.open().effects("armed-write")
    assert (record.state, record.attempt, record.evidence) == ("succeeded", 1, [])
    assert tool.sent == ["bob@example.com"]
    assert proxy.opened > 2  # it did reconnect


def test_result_committed_but_acknowledgement_lost_armed_in_the_tool(
    pg_target: Target, proxy: Proxy
) -> None:
    ledger = through(proxy, pg_target, lease=5, wait=5)
    tool = Tool(ledger)
    tool.during = lambda: lose_the_acknowledgement(proxy)  # armed inside the tool: no listener
    with c4a.run("armed-ack", ledger=ledger):
        assert tool.send("bob@example.com") == {"to": "bob@example.com", "n": 1}
    [record] = pg_target.open().effects("armed-ack")
    # The retry recognised its own committed write: no late "evidence" of itself.
    assert (record.state, record.attempt, record.evidence) == ("succeeded", 1, [])
    assert tool.sent == ["bob@example.com"]
    assert proxy.opened > 2


def test_result_never_written_is_doubt_never_a_rerun(pg_target: Target, proxy: Proxy) -> None:
    ledger = through(proxy, pg_target, lease=1, wait=10)
    ledger.store.finish_retry = 1.0
    tool = Tool(ledger)
    tool.during = proxy.down  # and it stays down past the retry
    with c4a.run("lost", ledger=ledger):
        with pytest.raises(c4a.EffectInDoubt, match="could not be written to the ledger"):
            tool.send("bob@example.com")
        proxy.accept()
        # Back up: the intent is still there, and this process knows it ran the tool and no
        # thread of it runs it any more: in doubt at once, never run again.
        with pytest.raises(c4a.EffectInDoubt, match="stopped running it without recording"):
            tool.send("bob@example.com")
    assert tool.sent == ["bob@example.com"]
    [record] = ledger.in_doubt()
    assert record.run_id == "lost"


def test_intent_committed_but_acknowledgement_lost(pg_target: Target, proxy: Proxy) -> None:
    ledger = through(proxy, pg_target, lease=1, wait=10)
    tool = Tool(ledger)
    # The claim is one statement in autocommit: it commits as it runs, and its answer is the
    # acknowledgement, lost here.
    on_statement(ledger, writes_intent, lambda: lose_the_acknowledgement(proxy))
    with c4a.run("intent", ledger=ledger):
        with pytest.raises(c4a.LedgerError, match="the ledger database failed"):
            tool.send("bob@example.com")
        assert tool.sent == []  # unsure the intent is durable, so the tool did not run
        proxy.accept()
        # The intent did land. It names this process and the claim that got no answer, so the
        # retry knows it as its own, that nothing ran, and goes on.
        assert tool.send("bob@example.com") == {"to": "bob@example.com", "n": 1}
        assert tool.send("bob@example.com") == {"to": "bob@example.com", "n": 1}
    assert tool.sent == ["bob@example.com"]
    [record] = pg_target.open().effects("intent")
    assert (record.state, record.attempt, record.evidence) == ("succeeded", 1, [])


def test_listener_unreachable_falls_back_to_polling(pg_target: Target, proxy: Proxy) -> None:
    ledger = through(proxy, pg_target, lease=30, wait=30)
    tool = Tool(ledger)
    go, inside = threading.Event(), threading.Event()
    with c4a.run("poll", ledger=ledger):
        tool.send("warm@example.com")
    with ledger.engine.connect(), ledger.engine.connect():
        pass  # two pooled connections, one for each thread below, open before the refusal
    tool.during = lambda: (inside.set(), go.wait(30))
    results: list[Any] = []

    def call() -> None:
        with c4a.run("poll", ledger=ledger):
            results.append(tool.send("bob@example.com"))

    owner = threading.Thread(target=call)
    owner.start()
    assert inside.wait(30)
    proxy.refuse()  # open connections live on; the waiter's listening connection cannot open
    waiter = threading.Thread(target=call)
    waiter.start()
    time.sleep(0.5)
    go.set()
    owner.join(30)
    waiter.join(30)
    assert results == [{"to": "bob@example.com", "n": 2}] * 2
    assert tool.sent == ["warm@example.com", "bob@example.com"]


# -- a real server restart ----------------------------------------------------------------------


def _cluster(port: int) -> tuple[str, str]:
    """(version, name) of the local cluster on ``port``, or skip saying why it cannot restart."""
    if shutil.which("pg_ctlcluster") is None or shutil.which("pg_lsclusters") is None:
        unavailable("a server restart needs pg_ctlcluster (Debian's postgresql-common)")
    if os.geteuid() != 0:
        unavailable("restarting the PostgreSQL server needs root")
    listing = subprocess.run(["pg_lsclusters", "-h"], capture_output=True, text=True, check=True)
    for line in listing.stdout.splitlines():
        fields = line.split()
        if len(fields) >= 3 and fields[2] == str(port):
            return fields[0], fields[1]
    unavailable(f"no local cluster listens on port {port}")


def _ctl(version: str, name: str, action: str) -> None:
    subprocess.run(
        ["pg_ctlcluster", "--skip-systemctl-redirect", version, name, action],
        capture_output=True,
        timeout=60,
        check=False,
    )


def _wait_ready(port: int, timeout: float = 60) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        probe = ["pg_isready", "-q", "-h", "127.0.0.1", "-p", str(port)]
        if subprocess.run(probe, check=False).returncode == 0:
            return True
        time.sleep(0.2)
    return False


@pytest.fixture
def restart(pg_target: Target) -> Iterator[Callable[[], None]]:
    """Restarts the server when called; the server is up again after the test, whatever happens."""
    port = make_url(pg_target.url).port or 5432
    version, name = _cluster(port)
    yield lambda: _ctl(version, name, "restart")
    if not _wait_ready(port, timeout=10):
        _ctl(version, name, "start")
        assert _wait_ready(port), "the PostgreSQL server did not come back"


@pytest.mark.serial  # restarts the server: every other test's connections would drop with it
def test_server_restart_mid_call(pg_target: Target, restart: Callable[[], None]) -> None:
    # The lease outlasts the restart: the heartbeat cannot renew it while the server is down.
    ledger = pg_target.open(lease=30, wait=60)
    tool = Tool(ledger)
    inside, restarted = threading.Event(), threading.Event()
    outcomes: dict[str, Any] = {}

    def call(who: str, to: str) -> None:
        try:
            with c4a.run("restart", ledger=ledger):
                outcomes[who] = tool.send(to)
        except Exception as exc:
            outcomes[who] = exc

    call("warm", "warm@example.com")  # pooled connections that the restart will kill
    tool.during = lambda: (inside.set(), restarted.wait(60))
    owner = threading.Thread(target=call, args=("owner", "bob@example.com"))
    owner.start()
    assert inside.wait(30)
    waiter = threading.Thread(target=call, args=("waiter", "bob@example.com"))
    waiter.start()  # waits on the owner's live lease, through the listening connection
    time.sleep(0.5)
    restart()
    restarted.set()  # the tool returns; its result write meets the restarted server
    owner.join(60)
    waiter.join(60)
    call("after", "carol@example.com")  # the same process and ledger carry on

    bob = {"to": "bob@example.com", "n": 2}
    assert outcomes == {
        "warm": {"to": "warm@example.com", "n": 1},
        "owner": bob,
        "waiter": bob,
        "after": {"to": "carol@example.com", "n": 3},
    }
    assert tool.sent == ["warm@example.com", "bob@example.com", "carol@example.com"]


def test_one_statement_claim_committed_but_acknowledgement_lost(
    pg_target: Target, proxy: Proxy
) -> None:
    # The claim's one statement commits; its answer never comes back; the line drops.
    ledger = through(proxy, pg_target, lease=5, wait=5)
    tool = Tool(ledger)
    with c4a.run("one-statement-intent", ledger=ledger):
        tool.send("warm@example.com")
        lose_the_acknowledgement(proxy)  # armed with no listener, before the claim
        with pytest.raises(c4a.LedgerError, match="the ledger database failed"):
            tool.send("bob@example.com")
        assert tool.sent == ["warm@example.com"]
        states = {r.args["to"]: r.state for r in pg_target.open().effects("one-statement-intent")}
        assert states["bob@example.com"] == "started"  # the intent did commit
        retried = _retry_until_up(lambda: tool.send("bob@example.com"))
    assert retried == {"to": "bob@example.com", "n": 2}
    assert tool.sent == ["warm@example.com", "bob@example.com"]
    records = {r.args["to"]: r for r in pg_target.open().effects("one-statement-intent")}
    assert (records["bob@example.com"].state, records["bob@example.com"].attempt) == (
        "succeeded",
        1,
    )


def _retry_until_up(call: Callable[[], Any]) -> Any:
    deadline = time.monotonic() + 30
    while True:
        try:
            return call()
        except c4a.LedgerError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
