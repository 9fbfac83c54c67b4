"""Approvals bound to the exact arguments, spent once, and not forgeable from the database."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from sqlalchemy import delete, insert, select, update

import call4agents as c4a
from call4agents.storage.tables import approvals
from tests.conftest import Target


class Payments:
    def __init__(self) -> None:
        self.sent: list[tuple[int, str]] = []

    def tool(self, **options: Any) -> c4a.Effect[..., str]:
        @c4a.effect(name="pay", approval=True, redact=("card",), **options)
        def pay(amount: int, to: str, card: str = "4242-4242-4242-4242") -> str:
            self.sent.append((amount, to))
            return f"paid {amount} to {to}"

        return pay


def ask(pay: c4a.Effect[..., str], *args: Any) -> c4a.ApprovalRequest:
    with pytest.raises(c4a.ApprovalRequired) as info:
        pay(*args)
    request = info.value.request
    assert isinstance(request, c4a.ApprovalRequest)
    return request


def test_a_yes_covers_exactly_the_call_shown(ledger: c4a.Ledger) -> None:
    bank = Payments()
    pay = bank.tool()
    with c4a.run("r"):
        request = ask(pay, 10, "alice")
        assert request.args == {"amount": 10, "to": "alice", "card": "***"}
        assert request.tool == "pay"
        assert ledger.effects("r") == []  # asking writes no intent
        ledger.approve(request.ticket, by="ann", reason="refund")
        assert pay(10, "alice") == "paid 10 to alice"
        assert pay(10, "alice") == "paid 10 to alice"  # a repeat returns, asks nothing
        other = ask(pay, 9999, "mallory")  # the yes does not stretch to other arguments
        assert other.ticket != request.ticket
    assert bank.sent == [(10, "alice")]
    [used] = ledger.approvals("r", state="spent")
    assert (used.ticket, used.decided_by) == (request.ticket, "ann")


def test_a_yes_under_a_shared_key_covers_only_the_arguments_shown(ledger: c4a.Ledger) -> None:
    # key= names one action for calls with other arguments; a yes still covers what it showed.
    bank = Payments()
    pay = bank.tool(key=lambda amount, to, card: f"invoice-{to}")
    with c4a.run("r"):
        shown = ask(pay, 5, "alice")
        ledger.approve(shown.ticket, by="ann")
        other = ask(pay, 5000, "alice")  # the same key, another amount: a ticket of its own
        assert other.ticket != shown.ticket
        assert other.args["amount"] == 5000
        assert bank.sent == []
        assert pay(5, "alice") == "paid 5 to alice"
    [used] = ledger.approvals("r", state="spent")
    assert used.ticket == shown.ticket


def test_a_yes_under_a_shared_key_does_not_cover_another_redacted_value(
    ledger: c4a.Ledger,
) -> None:
    # The card is redacted, so both tickets show "***"; the yes covers the card it was asked
    # about all the same (the ticket keeps the arguments' digest, signed).
    bank = Payments()
    pay = bank.tool(key=lambda amount, to, card: f"invoice-{to}")
    with c4a.run("r"):
        shown = ask(pay, 5, "alice", "4111-1111-1111-1111")
        ledger.approve(shown.ticket, by="ann")
        other = ask(pay, 5, "alice", "4999-9999-9999-9999")
        assert other.args == shown.args  # the same as shown
        assert other.ticket != shown.ticket
        assert pay(5, "alice", "4111-1111-1111-1111") == "paid 5 to alice"
    assert bank.sent == [(5, "alice")]


def test_a_tickets_digest_is_signed(ledger: c4a.Ledger) -> None:
    bank = Payments()
    pay = bank.tool(key=lambda amount, to, card: f"invoice-{to}")
    with c4a.run("r"):
        shown = ask(pay, 5, "alice", "4111-1111-1111-1111")
        ledger.approve(shown.ticket, by="ann")
        with ledger.engine.begin() as conn:  # re-aimed at another card, without the secret
            conn.execute(update(approvals).values(args_digest=None))
        with pytest.raises(c4a.ApprovalRequired, match="failed its signature check"):
            pay(5, "alice", "4999-9999-9999-9999")
    assert bank.sent == []


def test_no_wins_and_double_clicks_are_one_decision(ledger: c4a.Ledger) -> None:
    bank = Payments()
    pay = bank.tool()
    with c4a.run("r"):
        request = ask(pay, 5, "bob")
        ledger.approve(request.ticket, by="ann")
        ledger.approve(request.ticket, by="ann")  # double click
        ledger.deny(request.ticket, by="cid", reason="wrong account")  # a later no wins
        with pytest.raises(c4a.ApprovalDenied, match="denied by cid: wrong account"):
            pay(5, "bob")
        with pytest.raises(c4a.LedgerError, match="a no is final"):
            ledger.approve(request.ticket, by="ann")
    assert bank.sent == []


def test_one_yes_per_execution_in_call_scope(ledger: c4a.Ledger) -> None:
    bank = Payments()
    pay = bank.tool(scope="call")
    with c4a.run("r"):
        with c4a.tool_call("call-1"):
            ledger.approve(ask(pay, 1, "al").ticket, by="ann")
            pay(1, "al")
        with c4a.tool_call("call-2"):  # a deliberate second identical payment
            ledger.approve(ask(pay, 1, "al").ticket, by="ann")
            pay(1, "al")
    assert bank.sent == [(1, "al"), (1, "al")]


def test_a_failed_attempt_spends_its_yes(ledger: c4a.Ledger) -> None:
    tries: list[int] = []

    @c4a.effect(name="wire", approval=True)
    def wire(amount: int) -> str:
        tries.append(amount)
        if len(tries) == 1:
            raise ConnectionError("bank refused")
        return "ok"

    with c4a.run("r"):
        c4a.approve(wire, 3, by="ann")
        with pytest.raises(ConnectionError):
            wire(3)
        request = ask(wire, 3)  # the retry is a new execution: a new yes
        ledger.approve(request.ticket, by="ann")
        assert wire(3) == "ok"


def test_tickets_expire(ledger: c4a.Ledger) -> None:
    pay = Payments().tool(approval_ttl=0.3)
    with c4a.run("r"):
        first = ask(pay, 1, "al")
        time.sleep(0.5)
        with pytest.raises(c4a.LedgerError, match="expired"):
            ledger.approve(first.ticket, by="ann")
        with pytest.raises(c4a.LedgerError, match="expired; nothing was decided"):
            ledger.deny(first.ticket, by="ann")  # a no to an expired ticket, as a yes
        second = ask(pay, 1, "al")
        ledger.approve(second.ticket, by="ann")
        time.sleep(0.5)  # approved, but not used in time
        third = ask(pay, 1, "al")
    assert len({first.ticket, second.ticket, third.ticket}) == 3


def test_approve_in_code_and_deny_in_code(ledger: c4a.Ledger) -> None:
    bank = Payments()
    pay = bank.tool()
    with c4a.run("r"):
        c4a.approve(pay, 7, "dan", by="ann")
        c4a.deny(pay, 8, "eve", by="ann", reason="fraud")
        assert pay(7, "dan") == "paid 7 to dan"
        with pytest.raises(c4a.ApprovalDenied, match="fraud"):
            pay(8, "eve")
        assert c4a.approve(pay, 7, "dan", by="ann") is None  # already ran: nothing to approve


# -- tampering with the real ledger --------------------------------------------------------------


def approved(ledger: c4a.Ledger, pay: c4a.Effect[..., str], *args: Any) -> dict[str, Any]:
    ledger.approve(ask(pay, *args).ticket, by="ann")
    with ledger.engine.connect() as conn:
        row = conn.execute(select(approvals).where(approvals.c.state == "approved")).mappings()
        return dict(next(iter(row)))


def write(ledger: c4a.Ledger, stmt: Any) -> None:
    with ledger.engine.begin() as conn:
        conn.execute(stmt)


def test_a_row_copied_to_another_run_grants_nothing(ledger: c4a.Ledger) -> None:
    bank = Payments()
    pay = bank.tool()
    with c4a.run("r1"):
        row = approved(ledger, pay, 10, "alice")
    with c4a.run("r2"):
        wanted = ask(pay, 10, "alice")  # its key in run r2
        copy = {**row, "ticket": "apr_copy", "run_id": "r2", "key": wanted.key, "for_attempt": 1}
        write(ledger, insert(approvals).values(**copy))
        with pytest.raises(c4a.ApprovalRequired, match="failed its signature check"):
            pay(10, "alice")
    assert bank.sent == []


def test_edited_arguments_or_forged_rows_grant_nothing(ledger: c4a.Ledger) -> None:
    bank = Payments()
    pay = bank.tool()
    with c4a.run("r"):
        row = approved(ledger, pay, 10, "alice")
        evil = ask(pay, 9999, "mallory")
        # Point the approved row at the other call and make its shown arguments match.
        write(
            ledger,
            update(approvals)
            .where(approvals.c.ticket == row["ticket"])
            .values(key=evil.key, args='{"amount":9999,"to":"mallory","card":"***"}'),
        )
        with pytest.raises(c4a.ApprovalRequired):
            pay(9999, "mallory")
        forged = {
            **row,
            "ticket": "apr_forged",
            "key": evil.key,
            "signature": "00000000:" + "0" * 64,
        }
        write(ledger, insert(approvals).values(**forged))
        with pytest.raises(c4a.ApprovalRequired):
            pay(9999, "mallory")
        with pytest.raises(c4a.LedgerError, match="signature check"):
            ledger.approve("apr_forged", by="mallory")
    assert bank.sent == []


def test_deleting_spent_or_denied_markers_reenables_nothing(ledger: c4a.Ledger) -> None:
    bank = Payments()
    pay = bank.tool()
    with c4a.run("r"):
        row = approved(ledger, pay, 10, "alice")
        pay(10, "alice")
        write(ledger, delete(approvals))  # every marker gone
        assert pay(10, "alice") == "paid 10 to alice"  # still the recorded result, not a re-run
        write(ledger, insert(approvals).values(**row))  # the old "approved" row restored
        assert pay(10, "alice") == "paid 10 to alice"
        denied = ask(pay, 20, "bob")
        ledger.deny(denied.ticket, by="ann")
        write(ledger, delete(approvals).where(approvals.c.ticket == denied.ticket))
        ask(pay, 20, "bob")  # asks again; does not run
    assert bank.sent == [(10, "alice")]


def test_restored_yes_cannot_start_a_retry(ledger: c4a.Ledger) -> None:
    runs: list[int] = []

    @c4a.effect(name="wire", approval=True)
    def wire(amount: int) -> str:
        runs.append(amount)
        raise ConnectionError("refused")

    with c4a.run("r"):
        row = approved(ledger, wire, 1)
        with pytest.raises(ConnectionError):
            wire(1)
        write(ledger, delete(approvals))
        write(ledger, insert(approvals).values(**row))  # replay the spent yes
        with pytest.raises(c4a.ApprovalRequired):
            wire(1)
    assert runs == [1]


def test_rotated_secret_keeps_old_approvals_for_a_while(target: Target) -> None:
    old, new = "old-secret-" + "a" * 40, "new-secret-" + "b" * 40
    before = target.open(secret=old)
    with c4a.run("r"):
        before.approve(ask(Payments().tool(ledger=before), 1, "al").ticket, by="ann")
        retired = target.open(secret=new, previous_secrets=[(old, time.time() - 1)])
        with pytest.raises(c4a.ApprovalRequired, match="signature"):
            Payments().tool(ledger=retired)(1, "al")
        rotated = target.open(secret=new, previous_secrets=[(old, time.time() + 3600)])
        assert Payments().tool(ledger=rotated)(1, "al") == "paid 1 to al"


# -- policy ---------------------------------------------------------------------------------------


def test_policy_by_side_effect_class(target: Target) -> None:
    ledger = target.open(approval_for=("irreversible",))
    done: list[str] = []

    @c4a.effect(kind="irreversible", ledger=ledger)
    def delete_account(user: str) -> None:
        done.append("delete")

    @c4a.effect(kind="write", ledger=ledger)
    def note(user: str) -> None:
        done.append("note")

    @c4a.effect(kind="irreversible", approval=False, ledger=ledger)
    def archive(user: str) -> None:
        done.append("archive")

    @c4a.effect(kind="read", ledger=ledger)
    def lookup(user: str) -> None:
        done.append("lookup")

    with c4a.run("r"):
        with pytest.raises(c4a.ApprovalRequired):
            delete_account("u1")
        note("u1")
        archive("u1")
        lookup("u1")
    assert done == ["note", "archive", "lookup"]
    recorded = [e.tool.rsplit(".", 1)[-1] for e in ledger.effects("r")]
    assert recorded == ["note", "archive"]  # read tools skip the ledger


def test_per_run_limit_is_a_denial_not_a_crash(ledger: c4a.Ledger) -> None:
    @c4a.effect(name="sms", max_per_run=2)
    def sms(text: str) -> str:
        return text

    with c4a.run("r"):
        sms("a")
        sms("b")
        assert sms("a") == "a"  # a repeat is not a new execution
        with pytest.raises(c4a.ApprovalDenied, match="at most 2"):
            sms("c")
    with c4a.run("other"):
        sms("c")
    [*_, last] = ledger.effects()
    assert last.run_id == "other"
    assert len(ledger.effects("r")) == 2
    with pytest.raises(c4a.ConfigurationError, match="at least 1"):
        c4a.effect(max_per_run=0)


def test_request_approval_opens_one_ticket_without_claiming(ledger: c4a.Ledger) -> None:
    from call4agents.integration import action_for

    bank = Payments()
    pay = bank.tool()
    with c4a.run("r"):
        action = action_for("pay", pay.arguments((3, "al"), {}), pay.options, run_id="r")
        first = ledger.request_approval(action)
        assert first is not None
        assert ledger.request_approval(action) == first  # the same open ticket
        assert ledger.effects("r") == []
        ledger.approve(first.ticket, by="ann")
        assert pay(3, "al") == "paid 3 to al"
        assert ledger.request_approval(action) is None  # it ran: nothing left to ask


def test_a_worker_that_loses_the_yes_to_a_concurrent_one_gets_its_result(
    pg_target: Target,
) -> None:
    # PostgreSQL claims run side by side, and a claim reads the action before its gate spends
    # the yes. Here worker A is held inside its gate (the approvals table is locked) while worker
    # B reads no action and waits behind A's per-run limit lock; A then spends the yes and
    # commits, and B's gate finds the yes spent. B must take the action as a repeat (and get
    # A's result), never ask for a new yes.
    import psycopg

    ledger = c4a.init(pg_target.open(lease=5.0, wait=10.0))
    bank = Payments()
    pay = bank.tool(max_per_run=5)
    with c4a.run("r"):
        ledger.approve(ask(pay, 10, "alice").ticket, by="ann")
    plain = pg_target.url.replace("postgresql+psycopg://", "postgresql://", 1)
    table = f'"{pg_target.schema}".{approvals.name}'

    def worker() -> str:
        with c4a.run("r"):
            return pay(10, "alice")

    def waiting(locktype: str) -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with psycopg.connect(plain) as probe:
                found = probe.execute(
                    "SELECT count(*) FROM pg_locks WHERE NOT granted AND locktype = %s",
                    (locktype,),
                ).fetchone()
            if found and found[0]:
                return
            time.sleep(0.05)
        raise AssertionError(f"no worker came to wait on a {locktype} lock")

    with psycopg.connect(plain) as blocker, ThreadPoolExecutor(2) as pool:
        blocker.execute(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")
        first = pool.submit(worker)
        waiting("relation")  # A holds the limit lock and waits for the approvals table
        second = pool.submit(worker)
        waiting("advisory")  # B has read no action and waits for A's limit lock
        blocker.commit()
        assert [first.result(timeout=60), second.result(timeout=60)] == ["paid 10 to alice"] * 2
    assert bank.sent == [(10, "alice")]
    assert [a.state for a in ledger.approvals("r")] == ["spent"]
