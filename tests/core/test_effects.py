"""The behaviour suite: what an effect does in each state, on SQLite and on PostgreSQL."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from typing import Any

import pydantic
import pytest

import call4agents as c4a


class Calls:
    """Counts real executions of a tool body."""

    def __init__(self) -> None:
        self.n = 0
        self.lock = threading.Lock()

    def hit(self) -> int:
        with self.lock:
            self.n += 1
            return self.n


def test_repeat_returns_recorded_result_without_running(ledger: c4a.Ledger) -> None:
    calls = Calls()

    @c4a.effect
    def send_email(to: str, body: str) -> dict[str, Any]:
        return {"id": f"msg-{calls.hit()}", "to": to}

    with c4a.run("ticket-1"):
        first = send_email("bob@example.com", "hi")
        again = send_email(to="bob@example.com", body="hi")  # same call, keywords
        other = send_email("bob@example.com", "bye")
    assert first == again == {"id": "msg-1", "to": "bob@example.com"}
    assert other["id"] == "msg-2"
    assert calls.n == 2
    with c4a.run("ticket-2"):  # another run is another logical action
        send_email("bob@example.com", "hi")
    assert calls.n == 3


def test_keys_are_those_earlier_versions_recorded(sqlite_target: Any) -> None:
    # A key that changed between versions would make every recorded action look new: pinned.
    ledger = sqlite_target.open()

    @c4a.effect(name="shop.charge", ledger=ledger)
    def charge(cents: int) -> int:
        return cents

    @c4a.effect(name="shop.charge", ledger=ledger, scope="call")
    def charge_per_call(cents: int) -> int:
        return cents

    with c4a.run("order-7"):
        charge(1250)
        with c4a.tool_call("call_1"):
            charge_per_call(1250)
    assert [r.key for r in ledger.effects("order-7")] == [
        "a353c5daa15ab5ee6e9769c48b93611225c40414e73664967eb9ed0ef9be2761",
        "dc665282185ff695d1c9cbf4b398c7debf33f532ef1eac15955ff154cbca44c0",
    ]


def test_repeat_after_reopen_reads_the_ledger(target: Any, ledger: c4a.Ledger) -> None:
    calls = Calls()

    @c4a.effect(name="charge")
    def charge(amount: int) -> int:
        return calls.hit()

    with c4a.run("r"):
        assert charge(10) == 1
    fresh = c4a.init(target.open())  # a new process would start with an empty cache
    with c4a.run("r", ledger=fresh):
        assert charge(10) == 1
    assert calls.n == 1
    [record] = fresh.effects("r")
    assert record.state == "succeeded"
    assert record.args == {"amount": 10}
    assert record.result == 1


def test_a_resumed_run_reads_its_results_in_one_go(target: Any, ledger: c4a.Ledger) -> None:
    from sqlalchemy import event

    calls = Calls()

    @c4a.effect(name="step")
    def step(n: int, size: int = 1) -> str:
        calls.hit()
        return "x" * size

    with c4a.run("long"):
        for n in range(10):
            step(n)
        step(99, size=100_000)  # too large to be read in advance
    with c4a.run("other"):
        step(0)
    resumed = c4a.init(target.open())  # a new process: nothing in memory
    reads: list[str] = []
    event.listen(resumed.engine, "before_cursor_execute", lambda *a: reads.append(a[2]))
    with c4a.run("long", ledger=resumed):
        assert step(0) == "x"  # met in the database: a lone retry, perhaps
        assert not any("LIMIT" in sql for sql in reads)
        assert step(1) == "x"  # a second: the run is being resumed, its results read at once
        assert any("LIMIT" in sql for sql in reads)
        queries = len(reads)
        assert [step(n) for n in range(2, 10)] == ["x"] * 8
        assert len(reads) == queries  # served from memory: no round trip each
        assert step(99, size=100_000) == "x" * 100_000  # from the database
        assert len(reads) > queries
    with c4a.run("other", ledger=resumed):
        before = len(reads)
        assert step(0) == "x"  # another run is not read in advance
        assert len(reads) > before
        assert not any("LIMIT" in sql for sql in reads[before:])  # one repeat reads one row
    assert calls.n == 12  # nothing ran again


def test_failed_call_runs_again_as_new_attempt(ledger: c4a.Ledger) -> None:
    attempts: list[int] = []

    @c4a.effect
    def flaky() -> str:
        attempts.append(c4a.current().attempt)
        if len(attempts) == 1:
            raise ConnectionRefusedError("provider refused the connection")
        return "ok"

    with c4a.run("r"):
        with pytest.raises(ConnectionRefusedError):
            flaky()
        [record] = ledger.effects("r")
        assert record.state == "failed"
        assert record.error == "ConnectionRefusedError: provider refused the connection"
        assert flaky() == "ok"
        assert flaky() == "ok"
    assert attempts == [1, 2]


@pytest.mark.parametrize(
    "error",
    [TimeoutError("read timed out"), c4a.OutcomeUnknown("provider answered 502")],
    ids=["timeout", "outcome-unknown"],
)
def test_ambiguous_error_is_in_doubt_and_never_rerun(ledger: c4a.Ledger, error: Exception) -> None:
    calls = Calls()

    @c4a.effect
    def pay(amount: int) -> str:
        calls.hit()
        raise error

    with c4a.run("r"):
        with pytest.raises(type(error)):
            pay(5)
        with pytest.raises(c4a.EffectInDoubt, match="is in doubt") as info:
            pay(5)
    assert calls.n == 1
    assert info.value.tool.endswith("pay")
    assert "call4agents resolve" in str(info.value)
    [record] = ledger.in_doubt()
    assert record.state == "in_doubt"


def test_listed_error_means_in_doubt(ledger: c4a.Ledger) -> None:
    class GatewayError(Exception):
        pass

    @c4a.effect(in_doubt_on=(GatewayError,))
    def pay(amount: int) -> None:
        raise GatewayError("502 from the gateway")

    with c4a.run("r"):
        with pytest.raises(GatewayError):
            pay(1)
        with pytest.raises(c4a.EffectInDoubt):
            pay(1)


def test_cancellation_mid_call_is_in_doubt(ledger: c4a.Ledger) -> None:
    started = asyncio.Event()

    @c4a.effect
    async def transfer(amount: int) -> str:
        started.set()
        await asyncio.sleep(10)
        return "done"

    async def main() -> None:
        async with c4a.run("r"):
            task = asyncio.create_task(transfer(3))
            await started.wait()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            with pytest.raises(c4a.EffectInDoubt):
                await transfer(3)

    asyncio.run(main())


def test_resolve_happened_returns_the_given_result(ledger: c4a.Ledger) -> None:
    calls = Calls()

    @c4a.effect
    def pay(amount: int) -> dict[str, str]:
        calls.hit()
        raise TimeoutError("no answer")

    with c4a.run("r"), pytest.raises(TimeoutError):
        pay(7)
    [doubt] = ledger.in_doubt()
    settled = ledger.resolve(
        doubt.key[:10],
        happened=True,
        result={"charge": "ch_1"},
        by="ann",
        note="seen in the dashboard",
    )
    assert settled.state == "succeeded"
    assert settled.resolved_by == "ann"
    with c4a.run("r"):
        assert pay(7) == {"charge": "ch_1"}
    assert calls.n == 1


def test_resolve_did_not_happen_lets_it_run_again(ledger: c4a.Ledger) -> None:
    calls = Calls()

    @c4a.effect
    def pay(amount: int) -> int:
        if calls.hit() == 1:
            raise TimeoutError("no answer")
        return c4a.current().attempt

    with c4a.run("r"), pytest.raises(TimeoutError):
        pay(7)
    [doubt] = ledger.in_doubt()
    ledger.resolve(doubt.key, happened=False, by="ann")
    with c4a.run("r"):
        assert pay(7) == 2
    assert calls.n == 2


def test_resolve_refuses_what_is_not_in_doubt(ledger: c4a.Ledger) -> None:
    @c4a.effect
    def ping() -> int:
        return 1

    with c4a.run("r"):
        ping()
    [record] = ledger.effects("r")
    with pytest.raises(c4a.LedgerError, match="succeeded, not in doubt"):
        ledger.resolve(record.key, happened=False, by="ann")
    with pytest.raises(c4a.ConfigurationError, match="who found this out"):
        ledger.resolve(record.key, happened=False, by="")


def test_retry_in_doubt_resends_with_the_same_idempotency_key(ledger: c4a.Ledger) -> None:
    seen: list[tuple[str, int]] = []

    @c4a.effect(retry_in_doubt=True)
    def charge(amount: int) -> str:
        ctx = c4a.current()
        seen.append((ctx.idempotency_key, ctx.attempt))
        if len(seen) == 1:
            raise TimeoutError("lost the answer")
        return "ch_1"

    with c4a.run("r"):
        with pytest.raises(TimeoutError):
            charge(9)
        assert charge(9) == "ch_1"
        assert charge(9) == "ch_1"
    assert [a for _, a in seen] == [1, 2]
    assert seen[0][0] == seen[1][0]
    assert seen[0][0].startswith("c4a-")


def test_a_shared_key_retried_with_other_arguments(ledger: c4a.Ledger) -> None:
    # key= says two calls are one action. After a failed attempt (nothing happened) a call with
    # other arguments runs, and the record shows what ran. In doubt, the attempt that may have
    # happened is never replaced by a call with other arguments, even under retry_in_doubt.
    sent: list[int] = []

    @c4a.effect(key=lambda order, amount: order, retry_in_doubt=True)
    def charge(order: str, amount: int) -> str:
        sent.append(amount)
        if len(sent) == 1:
            raise ValueError("card declined")  # did not act
        if len(sent) == 3:
            raise TimeoutError("no answer")  # in doubt
        return f"ch_{amount}"

    def stored(order: str) -> tuple[dict[str, Any], str | None]:
        [record] = [r for r in ledger.effects("r") if r.args["order"] == order]
        found = ledger.store.stored_args(record.key)
        assert found is not None
        return record.args, found.digest

    with c4a.run("r"):
        with pytest.raises(ValueError):
            charge("o-1", 10)
        first_digest = stored("o-1")[1]
        assert charge("o-1", 12) == "ch_12"
        args, digest = stored("o-1")
        assert args == {"order": "o-1", "amount": 12}
        assert digest not in (None, first_digest)

        with pytest.raises(TimeoutError):
            charge("o-2", 5)
        with pytest.raises(c4a.EffectInDoubt, match="other arguments under this key"):
            charge("o-2", 6)
        assert sent == [10, 12, 5]
        assert charge("o-2", 5) == "ch_5"  # the same request: re-sent under its key
    assert sent == [10, 12, 5, 5]


def test_a_reconciler_never_judges_a_doubt_by_other_arguments(ledger: c4a.Ledger) -> None:
    # The attempt in doubt charged 5; a call for 6 under the same key= must not ask the
    # provider about 6, hear "did not happen" and charge again.
    provider: list[int] = []
    asked: list[int] = []

    def lookup(order: str, amount: int) -> c4a.DidNotHappen | c4a.Happened:
        asked.append(amount)
        return c4a.Happened(f"ch_{amount}") if amount in provider else c4a.DidNotHappen()

    @c4a.effect(key=lambda order, amount: order, check=lookup)
    def charge(order: str, amount: int) -> str:
        provider.append(amount)
        raise TimeoutError("charged, but the answer was lost")

    with c4a.run("r"):
        with pytest.raises(TimeoutError):
            charge("o-1", 5)
        with pytest.raises(c4a.EffectInDoubt, match="other arguments under this key"):
            charge("o-1", 6)
        assert asked == []
        assert charge("o-1", 5) == "ch_5"  # its own arguments: the reconciler settles it
    assert provider == [5]


def test_a_stale_take_over_looks_again(ledger: c4a.Ledger) -> None:
    # A worker that saw attempt 1 in doubt comes back after it was settled and taken up by a
    # call with other arguments: it is told to look again, not that the action is in doubt.
    @c4a.effect(key=lambda order, amount: order, retry_in_doubt=True)
    def charge(order: str, amount: int) -> str:
        return f"ch_{amount}"

    with c4a.run("r"):
        charge("o-1", 5)
    [record] = ledger.effects("r")
    assert ledger.store.take_over(record.key, 1, "me", 30, args="{}", args_digest="x") is None


@pytest.mark.parametrize("verdict", ["happened", "did-not-happen", "unknown"])
def test_check_reconciler_settles_doubt(ledger: c4a.Ledger, verdict: str) -> None:
    calls = Calls()
    checked: list[str] = []

    def lookup(amount: int) -> Any:
        checked.append(c4a.current().idempotency_key)
        if verdict == "happened":
            return c4a.Happened({"charge": "found"})
        if verdict == "did-not-happen":
            return c4a.DidNotHappen()
        return None

    @c4a.effect(check=lookup)
    def charge(amount: int) -> dict[str, str]:
        if calls.hit() == 1:
            raise TimeoutError("lost the answer")
        return {"charge": "new"}

    with c4a.run("r"):
        with pytest.raises(TimeoutError):
            charge(9)
        if verdict == "happened":
            assert charge(9) == {"charge": "found"}
            assert calls.n == 1
        elif verdict == "did-not-happen":
            assert charge(9) == {"charge": "new"}
            assert calls.n == 2
        else:
            with pytest.raises(c4a.EffectInDoubt):
                charge(9)
            assert calls.n == 1
    assert len(checked) == 1


def test_check_with_a_wrong_answer_type_says_what_to_return(ledger: c4a.Ledger) -> None:
    @c4a.effect(check=lambda amount: True)
    def charge(amount: int) -> None:
        raise TimeoutError

    with c4a.run("r"):
        with pytest.raises(TimeoutError):
            charge(1)
        with pytest.raises(c4a.ConfigurationError, match=r"c4a.Happened\(result\)"):
            charge(1)


def test_scope_call_runs_once_per_call_id(ledger: c4a.Ledger) -> None:
    calls = Calls()

    @c4a.effect(scope="call")
    def post(text: str) -> int:
        return calls.hit()

    with c4a.run("r"):
        with c4a.tool_call("call-1"):
            assert post("hello") == 1
            assert post("hello") == 1
        with c4a.tool_call("call-2"):
            assert post("hello") == 2
        with pytest.raises(c4a.ConfigurationError, match="no call id is known"):
            post("hello")


def test_ignore_and_key(ledger: c4a.Ledger) -> None:
    calls = Calls()

    @c4a.effect(ignore=("sent_at", "meta.request_id"))
    def notify(user: str, sent_at: float, meta: dict[str, str]) -> int:
        return calls.hit()

    @c4a.effect(key=lambda order, note: order["id"])
    def ship(order: dict[str, Any], note: str) -> int:
        return calls.hit()

    with c4a.run("r"):
        assert notify("ann", time.time(), {"request_id": "a", "lang": "en"}) == 1
        assert notify("ann", time.time() + 1, {"request_id": "b", "lang": "en"}) == 1
        assert notify("ann", 0.0, {"request_id": "b", "lang": "fr"}) == 2
        assert ship({"id": 7, "items": 1}, "first") == 3
        assert ship({"id": 7, "items": 2}, "second") == 3
    assert calls.n == 3


def test_unstable_arguments_are_refused_before_anything_is_written(ledger: c4a.Ledger) -> None:
    calls = Calls()

    @c4a.effect
    def save(payload: Any) -> None:
        calls.hit()

    with c4a.run("r"):
        with pytest.raises(c4a.UnstableArguments, match=r"'payload.rows\[1\]'.*NaN"):
            save({"rows": [1.0, float("nan")]})
        with pytest.raises(c4a.UnstableArguments, match="memory address"):
            save(object())
        with pytest.raises(c4a.UnstableArguments, match="naive datetime"):
            save(datetime(2026, 1, 1))  # noqa: DTZ001 - the bad input under test
        save(datetime(2026, 1, 1, tzinfo=timezone.utc))
    assert calls.n == 1
    assert len(ledger.effects("r")) == 1


def test_outside_a_run_is_a_clear_error(ledger: c4a.Ledger) -> None:
    @c4a.effect
    def send() -> None:
        pass

    with pytest.raises(c4a.ConfigurationError, match=r"outside a run.*c4a.run"):
        send()
    with pytest.raises(c4a.ConfigurationError, match="non-empty string"):
        c4a.run("")


def test_unstable_tool_names_are_refused() -> None:
    with pytest.raises(c4a.ConfigurationError, match="name="):
        c4a.effect(lambda: None)
    named = c4a.effect(name="noop")(lambda: None)
    assert named.tool == "noop"


def test_read_tools_skip_the_ledger(ledger: c4a.Ledger) -> None:
    calls = Calls()

    @c4a.effect(kind="read")
    def balance() -> int:
        return calls.hit()

    with c4a.run("r"):
        assert balance() == 1
        assert balance() == 2
    assert ledger.effects("r") == []
    with pytest.raises(c4a.ConfigurationError, match="kind='delete'"):
        c4a.effect(kind="delete")  # type: ignore[call-overload]


@dataclasses.dataclass
class Receipt:
    id: str
    amount: float
    at: datetime


class Order(pydantic.BaseModel):
    id: int
    lines: list[str]
    receipt: dict[str, Any]


def test_results_come_back_as_the_same_types(target: Any, ledger: c4a.Ledger) -> None:
    @c4a.effect(name="make_receipt")
    def make_receipt() -> Receipt:
        return Receipt("r1", 9.5, datetime(2026, 5, 1, tzinfo=timezone.utc))

    @c4a.effect(name="make_order")
    def make_order() -> Order:
        return Order(id=1, lines=["a"], receipt={"x": 1})

    with c4a.run("r"):
        receipt, order = make_receipt(), make_order()
    fresh = c4a.init(target.open())
    with c4a.run("r", ledger=fresh):
        assert make_receipt() == receipt
        assert isinstance(make_receipt(), Receipt)
        assert make_order() == order
        assert isinstance(make_order(), Order)


def test_a_result_that_cannot_be_stored_never_reruns(target: Any, ledger: c4a.Ledger) -> None:
    calls = Calls()

    @c4a.effect
    def open_socket() -> Any:
        calls.hit()
        return threading.Lock()

    with c4a.run("r"):
        with pytest.raises(c4a.ResultNotStored, match="recorded as done"):
            open_socket()
        with pytest.raises(c4a.ResultNotStored):
            open_socket()
    # A new process resuming the run reads first (a likely repeat) and finds no result to give:
    # still not run again.
    with c4a.run("r", ledger=target.open()), pytest.raises(c4a.ResultNotStored):
        open_socket()
    assert calls.n == 1
    [record] = ledger.effects("r")
    assert record.state == "succeeded"


def test_a_result_over_the_size_limit_is_not_stored(target: Any) -> None:
    small = c4a.init(target.open(max_result_bytes=1000))
    calls = Calls()

    @c4a.effect
    def export() -> str:
        calls.hit()
        return "x" * 5000

    with c4a.run("r", ledger=small):
        with pytest.raises(c4a.ResultNotStored, match="1,000-byte limit"):
            export()
        with pytest.raises(c4a.ResultNotStored):
            export()
    assert calls.n == 1


def test_threads_need_bind_to_see_the_run(ledger: c4a.Ledger) -> None:
    calls = Calls()

    @c4a.effect
    def send(n: int) -> int:
        calls.hit()
        return n * 2

    with c4a.run("r"), ThreadPoolExecutor(4) as pool:
        bound = list(pool.map(c4a.bind(send), [1, 2, 3, 1]))
        with pytest.raises(c4a.ConfigurationError, match="outside a run"):
            pool.submit(send, 9).result()
    assert bound == [2, 4, 6, 2]
    assert calls.n == 3


def test_asyncio_tasks_inherit_the_run(ledger: c4a.Ledger) -> None:
    calls = Calls()

    @c4a.effect
    async def send(n: int) -> int:
        calls.hit()
        await asyncio.sleep(0.01)
        return n

    async def main() -> list[int]:
        async with c4a.run("r"):
            return list(await asyncio.gather(*(send(n) for n in (1, 2, 1, 2, 3))))

    assert asyncio.run(main()) == [1, 2, 1, 2, 3]
    assert calls.n == 3


def test_second_caller_waits_for_a_live_owner(ledger: c4a.Ledger) -> None:
    calls = Calls()
    entered = threading.Event()

    @c4a.effect(lease=0.6)
    def slow() -> str:
        calls.hit()
        entered.set()
        time.sleep(2.0)  # longer than the lease: the heartbeat must keep it alive
        return "done"

    results: list[Any] = []

    def first() -> None:
        with c4a.run("r"):
            results.append(slow())

    thread = threading.Thread(target=first)
    thread.start()
    assert entered.wait(5)
    with c4a.run("r"):
        assert slow() == "done"
    thread.join()
    assert results == ["done"]
    assert calls.n == 1


def test_second_caller_gives_up_with_in_progress(ledger: c4a.Ledger) -> None:
    entered, release = threading.Event(), threading.Event()

    @c4a.effect(wait=0.3)
    def slow() -> str:
        entered.set()
        release.wait(10)
        return "done"

    thread = threading.Thread(target=c4a.bind(lambda: slow()))
    with c4a.run("r"):
        thread = threading.Thread(target=c4a.bind(slow))
        thread.start()
        assert entered.wait(5)
        with pytest.raises(c4a.EffectInProgress, match="being run by another worker"):
            slow()
    release.set()
    thread.join()


def test_redacted_values_stay_out_of_the_ledger(target: Any, ledger: c4a.Ledger) -> None:
    secret_a, secret_b = "sk_live_AAAA1111", "sk_live_BBBB2222"
    calls = Calls()

    @c4a.effect(redact=("api_key",))
    def call_api(api_key: str, q: str) -> int:
        if q == "boom":
            raise ValueError(f"bad key {api_key}")
        return calls.hit()

    with c4a.run("r"):
        assert call_api(secret_a, "x") == 1
        assert call_api(secret_a, "x") == 1
        assert call_api(secret_b, "x") == 2  # different values still make different actions
        with pytest.raises(ValueError, match="bad key"):
            call_api(secret_a, "boom")
    records = ledger.effects("r")
    assert records[0].args == {"api_key": "***", "q": "x"}
    assert all(secret_a not in (r.error or "") for r in records)
    assert records[-1].error == "ValueError: bad key ***"
    if target.backend == "sqlite":
        ledger.close()
        raw = b"".join(p.read_bytes() for p in target_files(target))
        assert secret_a.encode() not in raw
        assert secret_b.encode() not in raw


def target_files(target: Any) -> list[Any]:
    from pathlib import Path

    db = Path(target.url.removeprefix("sqlite:///"))
    return [p for p in db.parent.iterdir() if p.name.startswith(db.name)]


def test_gc_keeps_tombstones_and_open_actions(target: Any, ledger: c4a.Ledger) -> None:
    calls = Calls()

    @c4a.effect
    def send(n: int) -> int:
        calls.hit()
        if n == 3:
            raise TimeoutError
        if n == 2:
            raise ValueError("refused")
        return n

    with c4a.run("r"):
        send(1)
        with pytest.raises(ValueError):
            send(2)
        with pytest.raises(TimeoutError):
            send(3)
    pruned = next(r.key for r in ledger.effects("r") if r.state == "succeeded")
    kept = ledger.store.stored_args(pruned)
    assert kept is not None
    assert len(kept.digest or "") == 64
    report = ledger.gc(0)
    assert (report.pruned, report.deleted, report.kept_open) == (1, 1, 1)
    # The digest goes with the arguments it stood for.
    assert ledger.store.stored_args(pruned) == ("{}", None, True)
    fresh = c4a.init(target.open())
    with c4a.run("r", ledger=fresh):
        with pytest.raises(c4a.ResultPruned, match="not run again"):
            send(1)
        with pytest.raises(c4a.EffectInDoubt):
            send(3)
    assert calls.n == 3


def test_runs_and_effects_listing(ledger: c4a.Ledger) -> None:
    @c4a.effect
    def step(n: int) -> int:
        return n

    for run_id in ("a", "b"):
        with c4a.run(run_id):
            step(1)
            step(2)
    runs = {r.run_id: r for r in ledger.runs()}
    assert runs["a"].actions == 2
    assert runs["a"].succeeded == 2
    assert [r.args["n"] for r in ledger.effects("b")] == [1, 2]


def test_durability_setting_is_checked(target: Any) -> None:
    with pytest.raises(c4a.ConfigurationError, match="'power'"):
        target.open(durability="disk")
    fast = target.open(durability="process")

    @c4a.effect(ledger=fast)
    def step() -> int:
        return 1

    with c4a.run("r"):
        assert step() == 1


def _plain(a: int, b: str = "x", c: Any = None) -> None: ...
def _keyword_only(a: int, *, b: str = "x") -> None: ...
def _variadic(a: int, *rest: int, **more: int) -> None: ...


@pytest.mark.parametrize("fn", [_plain, _keyword_only, _variadic])
@pytest.mark.parametrize(
    ("args", "kwargs"),
    [
        ((1,), {}),
        ((1, "y"), {}),
        ((1, "y", [3]), {}),
        ((), {"a": 1, "c": 2}),
        ((1,), {"b": "z"}),
        ((1, 2, 3, 4), {}),  # too many for a plain signature
        ((), {}),  # a required argument missing
        ((1,), {"a": 2}),  # given twice
        ((1,), {"d": 2}),  # not a parameter
    ],
)
def test_arguments_bind_as_the_signature_does(fn: Any, args: tuple[Any, ...], kwargs: Any) -> None:
    # The quick binding for plain signatures must agree with inspect, refusals included.
    import inspect

    tool = c4a.effect(fn, name="bind")
    try:
        bound = inspect.signature(fn).bind(*args, **kwargs)
    except TypeError as exc:
        with pytest.raises(TypeError, match=f"bind: {exc}"):
            tool.arguments(args, dict(kwargs))
        return
    bound.apply_defaults()
    assert tool.arguments(args, dict(kwargs)) == dict(bound.arguments)
    assert list(tool.arguments(args, dict(kwargs))) == list(bound.arguments)  # same order


def test_a_methods_object_is_not_an_argument(ledger: c4a.Ledger) -> None:
    class Mailer:
        @c4a.effect(name="mailer.send")
        def send(self, to: str, cc: str = "") -> str:
            return f"{to}{cc}"

    with c4a.run("method-run", ledger=ledger):
        assert Mailer().send("ann") == "ann"
        assert Mailer().send(to="ann") == "ann"  # another object, the same action
    [row] = ledger.effects("method-run")
    assert row.args == {"to": "ann", "cc": ""}


def test_an_async_call_cancelled_again_while_its_doubt_is_written_is_waited_for(
    ledger: c4a.Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """anyio cancels a scope's task at each await: a second cancellation while the first one's
    "in doubt" is being written must not let another caller judge the action before it lands."""
    import importlib

    effect_module = importlib.import_module("call4agents.engine.effect")
    real = effect_module.record_error
    writing = threading.Event()

    def slow_record_error(*args: Any) -> None:
        writing.set()
        time.sleep(1.0)
        real(*args)

    monkeypatch.setattr(effect_module, "record_error", slow_record_error)

    @c4a.effect(name="transfer", ledger=ledger)
    async def transfer(amount: int) -> str:
        await asyncio.Event().wait()  # the caller gives up first
        return "sent"

    async def main() -> c4a.EffectInDoubt:
        async with c4a.run("cancelled-twice", ledger=ledger):
            task = asyncio.create_task(transfer(5))
            await asyncio.sleep(0.3)  # claimed, and waiting in the tool
            task.cancel()
            assert await asyncio.to_thread(writing.wait, 10)
            task.cancel()  # again, while the doubt is written
            with pytest.raises(asyncio.CancelledError):
                await task
            with pytest.raises(c4a.EffectInDoubt) as found:
                await transfer(5)  # the same action: waits for the write, then is told
            return found.value

    assert "CancelledError" in asyncio.run(main()).reason
