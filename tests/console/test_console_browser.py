"""The console in Debian's Chromium, against real agents in their own processes.

A person approves, denies and settles in the browser; the agent, a separate process, then goes on
and the tool runs once (or never). Each real execution is counted in a file outside the ledger.
Screenshots of each page are kept in the test's temporary folder.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import NEEDS_PY311, OLD_PYTHON, Target, run_child
from tests.console.browser import chromium_path, console

pytestmark = pytest.mark.slow
HERE = Path(__file__).parent
LANGGRAPH_CHILD = HERE.parent / "langgraph" / "agent_child.py"


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    path = chromium_path()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=path, args=["--no-sandbox"])
        yield launched
        launched.close()


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("console-screenshots")


def agent(target: Target, tmp_path: Path, run_id: str, tool: str, mode: str = "ok") -> Any:
    done = run_child(
        HERE / "agent_child.py",
        run_id,
        tool,
        str(tmp_path / "executed.txt"),
        mode,
        env=target.env(),
    )
    lines = done.stdout.strip().splitlines()
    assert lines, done.stderr
    return done.returncode, json.loads(lines[-1])


def executed(tmp_path: Path) -> list[str]:
    path = tmp_path / "executed.txt"
    return path.read_text().splitlines() if path.exists() else []


def signed_in(browser: Any, address: str, **context: Any) -> Any:
    page = browser.new_context(**context).new_page()
    answer = page.goto(address)
    assert answer is not None
    assert answer.ok
    assert "token=" not in page.url  # the token became a cookie and left the address bar
    return page


def cards(page: Any, address: str) -> None:
    """The inbox with each ticket's full card (its lines are the default)."""
    answer = page.goto(address.split("?")[0] + "?view=cards")
    assert answer is not None
    assert answer.ok


def test_approve_in_the_browser_then_the_agent_runs_the_tool_once(
    browser: Any, target: Target, tmp_path: Path, shots: Path
) -> None:
    code, out = agent(target, tmp_path, "refund-17", "refund")
    assert code == 3
    ticket = out["waiting"]
    with console(target, "--operator", "ann") as address:
        page = signed_in(browser, address)
        page.screenshot(path=str(shots / f"inbox-lines-{target.backend}.png"), full_page=True)
        line = page.locator(f"li#{ticket}")
        assert "refund in run refund-17" in line.inner_text()
        with page.expect_navigation():
            line.locator("a.open").click()  # the line opens the ticket's full card
        card = page.locator(f"section#{ticket}")
        assert "refund" in card.inner_text()
        assert '"A-17"' in card.locator("pre.json").inner_text()
        assert "4242" not in page.content()  # the redacted card is masked, and said so
        assert "1 value(s) redacted" in card.inner_text()
        page.screenshot(path=str(shots / f"inbox-{target.backend}.png"), full_page=True)
        card.locator("textarea[name=reason]").fill("customer refund agreed")
        card.locator("button.approve").click()
        assert "Approved refund in run refund-17" in page.locator("p.ok").inner_text()
        page.screenshot(path=str(shots / f"approved-{target.backend}.png"))
    code, out = agent(target, tmp_path, "refund-17", "refund")
    assert (code, out) == (0, {"result": {"refund_id": "rf-A-17"}})
    code, out = agent(target, tmp_path, "refund-17", "refund")  # a repeat: from the record
    assert code == 0
    assert executed(tmp_path) == ["refund A-17 40"]
    [spent] = target.open().approvals("refund-17")
    assert (spent.state, spent.decided_by, spent.reason) == (
        "spent",
        "ann",
        "customer refund agreed",
    )


@pytest.mark.skipif(OLD_PYTHON, reason=NEEDS_PY311)
@pytest.mark.parametrize("decision", ["approve", "deny"])
def test_a_langgraph_agent_goes_on_with_the_browsers_answer(
    browser: Any, sqlite_target: Target, tmp_path: Path, shots: Path, decision: str
) -> None:
    outbox = tmp_path / "outbox.jsonl"
    env = {
        **sqlite_target.env(),
        "LG_MODE": "once",
        "LG_SAVER": "sqlite",
        "LG_CKPT": str(tmp_path / "checkpoints.db"),
        "LG_THREAD": "lg-thread-1",
        "LG_OUTBOX": str(outbox),
        "LG_APPROVAL": "1",
    }
    first = run_child(LANGGRAPH_CHILD, "start", env=env)
    [paused] = json.loads(first.stdout.strip().splitlines()[-1])["interrupts"]
    with console(sqlite_target, "--operator", "ann") as address:
        page = signed_in(browser, address)
        cards(page, address)
        card = page.locator(f"section#{paused['ticket']}")
        assert "send_email" in card.inner_text()
        card.locator(f"button.{decision}").click()
        assert "send_email in run lg-thread-1" in page.locator("p.ok").inner_text()
        page.screenshot(path=str(shots / f"langgraph-{decision}.png"))
    # The application resumes the pause; the ledger holds the person's answer, which decides.
    resumed = run_child(
        LANGGRAPH_CHILD, "answer", env={**env, "LG_DECISION": '{"type": "approve"}'}
    )
    [message] = json.loads(resumed.stdout.strip().splitlines()[-1])["tool_messages"]
    sent = outbox.read_text().splitlines() if outbox.exists() else []
    [ticket] = sqlite_target.open().approvals("lg-thread-1")
    assert ticket.decided_by == "ann"
    if decision == "approve":
        assert message["status"] == "success"
        assert len(sent) == 1
        assert ticket.state == "spent"
    else:  # the model is told, as a tool error, and nothing was sent
        assert message["status"] == "error"
        assert "ann" in message["content"]
        assert sent == []


def test_deny_in_the_browser_and_the_tool_never_runs(
    browser: Any, sqlite_target: Target, tmp_path: Path
) -> None:
    code, out = agent(sqlite_target, tmp_path, "refund-18", "refund")
    ticket = out["waiting"]
    with console(sqlite_target, "--operator", "ann") as address:
        page = signed_in(browser, address)
        cards(page, address)
        card = page.locator(f"section#{ticket}")
        card.locator("textarea[name=reason]").fill("duplicate request")
        card.locator("button.deny").click()
        assert "Denied refund" in page.locator("p.ok").inner_text()
    code, out = agent(sqlite_target, tmp_path, "refund-18", "refund")
    assert code == 4
    assert "duplicate request" in out["denied"] or "denied" in out["denied"]
    assert executed(tmp_path) == []


def test_in_doubt_settled_in_the_browser_then_the_retry_gets_the_recorded_result(
    browser: Any, sqlite_target: Target, tmp_path: Path, shots: Path
) -> None:
    code, _ = agent(sqlite_target, tmp_path, "mail-1", "email", "timeout")
    assert code == 5
    [doubt] = sqlite_target.open().in_doubt()
    with console(sqlite_target, "--operator", "ann") as address:
        page = signed_in(browser, address)
        page.goto(address.split("?")[0] + "doubt")
        card = page.locator(f"section#k{doubt.key[:12]}")
        assert doubt.idempotency_key in card.inner_text()
        page.screenshot(path=str(shots / "in-doubt.png"), full_page=True)
        card.locator("input[value=happened]").check()
        card.locator("textarea[name=result]").fill('{"id": "msg-0042"')  # malformed first
        card.locator("button.settle").click()
        assert "not valid JSON" in page.locator("p.error").inner_text()
        assert "nothing was recorded" in page.locator("p.error").inner_text()
        page.go_back()
        card = page.locator(f"section#k{doubt.key[:12]}")
        card.locator("input[value=happened]").check()
        card.locator("textarea[name=result]").fill('{"id": "msg-0042"}')
        card.locator("input[name=note]").fill("found in the provider's log")
        card.locator("button.settle").click()
        assert "in run mail-1: it happened." in page.locator("p.ok").inner_text()
        base = address.split("?")[0]
        for name, path in (("runs", "runs"), ("run", "run?id=mail-1"), ("health", "health")):
            shown = page.goto(base + path)
            assert shown is not None
            assert shown.ok
            page.screenshot(path=str(shots / f"{name}.png"), full_page=True)
        run = page.goto(base + "run?id=mail-1").text()  # type: ignore[union-attr]
        assert "it happened, said ann" in run
        assert "found in the provider&#39;s log" in run
    code, out = agent(sqlite_target, tmp_path, "mail-1", "email")
    assert (code, out) == (0, {"result": {"id": "msg-0042"}})
    assert executed(tmp_path) == ["email bob@example.com"]  # only the attempt that timed out


def test_two_browsers_deciding_one_ticket(
    browser: Any, sqlite_target: Target, tmp_path: Path, shots: Path
) -> None:
    _, out = agent(sqlite_target, tmp_path, "refund-19", "refund")
    ticket = out["waiting"]
    # An SSO proxy in front names each person; each browser context plays one of them.
    # The browser connects from 127.0.0.1, the proxy's address here.
    trusted = ("--user-header", "X-User", "--trusted-proxy", "127.0.0.1")
    with console(sqlite_target, *trusted) as address:
        olga = signed_in(browser, address, extra_http_headers={"X-User": "olga"})
        pete = signed_in(browser, address, extra_http_headers={"X-User": "pete"})
        cards(olga, address)
        cards(pete, address)
        olga.locator(f"section#{ticket} button.approve").click()
        assert "Approved refund" in olga.locator("p.ok").inner_text()
        pete.locator(f"section#{ticket} button.deny").click()  # his page is stale now
        told = pete.locator("p.error").inner_text()
        assert "already approved by olga" in told
        assert "your decision was not recorded" in told
        pete.screenshot(path=str(shots / "second-decision-refused.png"))
    found = sqlite_target.open().approval(ticket)
    assert found is not None
    assert (found.state, found.decided_by) == ("approved", "olga")


def test_sign_in_csrf_read_only_and_bad_input(
    browser: Any, sqlite_target: Target, tmp_path: Path, shots: Path
) -> None:
    _, out = agent(sqlite_target, tmp_path, "refund-20", "refund")
    ticket = out["waiting"]
    with console(sqlite_target, "--operator", "ann", "--read-only-users", "nobody") as address:
        base = address.split("?")[0]
        stranger = browser.new_context().new_page()
        answer = stranger.goto(base)
        assert answer is not None
        assert answer.status == 401
        page = signed_in(browser, address)
        cards(page, address)
        fingerprint = page.locator(f"section#{ticket} input[name=fingerprint]").get_attribute(
            "value"
        )
        forged = page.request.post(
            f"{base}approvals/{ticket}", form={"fingerprint": fingerprint, "decision": "approve"}
        )
        assert forged.status == 403
        assert "CSRF" in forged.text()
        missing = page.goto(f"{base}approvals/apr_0000000000")
        assert missing is not None
        assert missing.status == 404
        assert "there is no approval ticket" in page.locator("p.error").inner_text()
        page.screenshot(path=str(shots / "unknown-ticket.png"))
    with console(sqlite_target, "--operator", "vic", "--read-only") as address:
        viewer = signed_in(browser, address)
        assert "(read-only)" in viewer.locator("header").inner_text()
        assert viewer.locator("button.approve").count() == 0
        base = address.split("?")[0]
        tried = viewer.request.post(
            f"{base}approvals/{ticket}", form={"fingerprint": fingerprint, "decision": "approve"}
        )
        assert tried.status == 403
        assert "read-only" in tried.text()
    found = sqlite_target.open().approval(ticket)
    assert found is not None
    assert found.state == "pending"


def test_a_new_ticket_appears_without_a_reload(
    browser: Any, sqlite_target: Target, tmp_path: Path
) -> None:
    sqlite_target.open()  # an empty ledger: the console does not create one
    with console(sqlite_target, "--operator", "ann") as address:
        page = signed_in(browser, address)
        assert "No approvals waiting" in page.locator("main").inner_text()
        _, out = agent(sqlite_target, tmp_path, "refund-21", "refund")
        page.locator(f"#{out['waiting']}").wait_for(timeout=15_000)


@pytest.mark.parametrize("decision", ["approve", "deny"])
def test_an_agents_sdk_agent_goes_on_with_the_browsers_answer(
    browser: Any, sqlite_target: Target, tmp_path: Path, decision: str
) -> None:
    state, outbox = tmp_path / "state.json", tmp_path / "outbox.jsonl"
    env = sqlite_target.env()
    started = run_child(HERE / "sdk_child.py", "start", str(state), str(outbox), env=env)
    assert json.loads(started.stdout.strip().splitlines()[-1]) == {"paused": 1}, started.stderr
    [ticket] = sqlite_target.open().approvals("sdk-run-1", state="pending")
    with console(sqlite_target, "--operator", "ann") as address:
        page = signed_in(browser, address)
        cards(page, address)
        card = page.locator(f"section#{ticket.ticket}")
        assert "wire" in card.inner_text()
        card.locator("textarea[name=reason]").fill("checked with the customer")
        card.locator(f"button.{decision}").click()
        assert "in run sdk-run-1" in page.locator("p.ok").inner_text()
    resumed = run_child(HERE / "sdk_child.py", "resume", str(state), str(outbox), env=env)
    [told] = json.loads(resumed.stdout.strip().splitlines()[-1])["outputs"]
    wired = outbox.read_text().splitlines() if outbox.exists() else []
    if decision == "approve":
        assert told == "wired 500 to bob"
        assert len(wired) == 1
    else:  # the application said go on, but the ledger holds the person's no
        assert "ann" in told
        assert "checked with the customer" in told
        assert wired == []


def test_on_postgresql_a_new_ticket_is_pushed_not_polled(
    browser: Any, pg_target: Target, tmp_path: Path
) -> None:
    pg_target.open()  # an empty ledger
    with console(pg_target, "--operator", "ann") as address:
        page = signed_in(browser, address)
        assert "No approvals waiting" in page.locator("main").inner_text()
        # The page listens to the console's event stream, fed by LISTEN/NOTIFY...
        # (A locator's wait, not wait_for_function: a polling predicate is a string the page's
        # CSP, rightly, refuses to evaluate.)
        page.locator("body[data-live-mode='listen']").wait_for(state="attached", timeout=15_000)
        polls: list[str] = []
        page.on("request", lambda r: polls.append(r.url) if "/api/live" in r.url else None)
        _, out = agent(pg_target, tmp_path, "refund-22", "refund")
        page.locator(f"#{out['waiting']}").wait_for(timeout=15_000)
        # ...so the ticket arrived without a reload and without a single poll.
        assert polls == []
        assert page.evaluate("document.body.dataset.liveMode") == "listen"


def test_on_sqlite_the_page_polls(browser: Any, sqlite_target: Target, tmp_path: Path) -> None:
    sqlite_target.open()
    with console(sqlite_target, "--operator", "ann") as address:
        page = signed_in(browser, address)
        with page.expect_request(lambda r: "/api/live" in r.url, timeout=15_000):
            pass  # the stream answered 204: the 2-second poll carries on
        assert page.evaluate("document.body.dataset.liveMode") == "poll"


def test_keys_move_between_tickets_and_decide_only_after_a_confirm(
    browser: Any, sqlite_target: Target
) -> None:
    import call4agents as c4a
    from tests.console.helpers import open_ticket

    ledger = c4a.init(sqlite_target.open())
    first, second = open_ticket("keys-1", amount=10), open_ticket("keys-2", amount=20)
    asked: list[str] = []
    accept: list[bool] = []  # the answer to each confirm, in turn

    def answer(dialog: Any) -> None:
        asked.append(dialog.message)
        dialog.accept() if accept.pop(0) else dialog.dismiss()

    def state(ticket: str) -> str:
        found = ledger.approval(ticket)
        assert found is not None
        return found.state

    with console(sqlite_target, "--operator", "ann") as address:
        page = signed_in(browser, address)
        cards(page, address)
        page.on("dialog", answer)
        assert "approves it, " in page.locator("p.keys").inner_text()

        def focused() -> str:
            return str(page.evaluate("document.activeElement.id"))

        for key, card in (("j", first), ("j", second), ("j", second), ("k", first)):
            page.keyboard.press(key)
            assert focused() == card.ticket
        accept.append(False)  # d asks first; saying no decides nothing
        page.keyboard.press("d")
        assert asked == ["Deny pay in run keys-1, with the arguments shown?"]
        assert state(first.ticket) == "pending"
        # Letters typed into a reason are text, not keys: no confirm, no decision.
        page.locator(f"section#{second.ticket} textarea[name=reason]").press_sequentially("ad")
        assert len(asked) == 1
        page.locator(f"section#{first.ticket}").focus()
        accept.append(True)
        with page.expect_navigation():
            page.keyboard.press("a")
        assert asked[-1] == "Approve pay in run keys-1, with the arguments shown?"
        assert "Approved pay in run keys-1" in page.locator("p.ok").inner_text()
    decided = ledger.approval(first.ticket)
    assert decided is not None
    assert (decided.state, decided.decided_by) == ("approved", "ann")
    assert state(second.ticket) == "pending"


def test_ticked_tickets_are_decided_after_one_confirm_at_phone_width(
    browser: Any, sqlite_target: Target
) -> None:
    import call4agents as c4a
    from tests.console.helpers import open_ticket

    ledger = c4a.init(sqlite_target.open())
    tickets = [open_ticket(f"tick-{i}", amount=i).ticket for i in range(3)]
    asked: list[str] = []
    accept = [False, True]

    def answer(dialog: Any) -> None:
        asked.append(dialog.message)
        dialog.accept() if accept.pop(0) else dialog.dismiss()

    def states() -> list[str]:
        return [ledger.approval(t).state for t in tickets]  # type: ignore[union-attr]

    with console(sqlite_target, "--operator", "ann") as address:
        page = signed_in(browser, address, viewport={"width": 390, "height": 844})
        page.on("dialog", answer)
        for t in tickets[:2]:
            page.locator(f"li#{t} input[type=checkbox]").check()  # ticked on its line
        page.locator("#bulk button.approve").click()
        assert asked == ["Approve 2 ticked ticket(s), each with the arguments its card shows?"]
        assert states() == ["pending"] * 3  # said no: nothing decided
        with page.expect_navigation():
            page.locator("#bulk button.approve").click()
        assert page.locator("ul.bulk-result li.done").count() == 2
        # Back on the inbox, where the ticket left comes up next.
        assert [r.get_attribute("id") for r in page.locator("li.row").all()] == tickets[2:]
        assert page.evaluate("document.documentElement.scrollWidth") <= 390
    assert states() == ["approved", "approved", "pending"]


def test_a_changed_redacted_card_reads_differs_and_its_value_is_nowhere(
    browser: Any, sqlite_target: Target
) -> None:
    import call4agents as c4a
    from tests.console.helpers import open_ticket, pay_tool

    ledger = c4a.init(sqlite_target.open())
    first = open_ticket("refund-1", amount=40)
    ledger.approve(first.ticket, by="ann")
    with c4a.run("refund-1"):
        pay_tool()(40, "alice")  # the refund ran on its yes, for card 4242...
    again = open_ticket("refund-1", amount=40, card="9999-9999-9999-9999")
    with console(sqlite_target, "--operator", "ann") as address:
        page = signed_in(browser, address, viewport={"width": 390, "height": 844})
        cards(page, address)
        card = page.locator(f"section#{again.ticket}")
        row = card.locator("table.changes tr", has=page.locator("code", has_text="card"))
        assert "differs (redacted: the value is not shown)" in row.inner_text()
        amount = card.locator("table.changes tr", has=page.locator("code", has_text="amount"))
        assert "same" in amount.inner_text()
        everything = page.content() + page.locator("body").inner_text()
        everything += page.locator("body").aria_snapshot()  # what a screen reader is given
        for secret in ("9999", "4242", *(again.redacted_marks or {}).values()):
            assert secret not in everything
        assert page.evaluate("document.documentElement.scrollWidth") <= 390


def test_on_a_phone_the_inbox_opens_on_tickets_and_a_decision_goes_on_to_the_next(
    browser: Any, sqlite_target: Target
) -> None:
    import call4agents as c4a
    from tests.console.helpers import open_ticket

    ledger = c4a.init(sqlite_target.open())
    shop = [open_ticket(f"shop-{i}", amount=i).ticket for i in range(12)]
    open_ticket("bank-1", amount=99)  # not in the filter
    with console(sqlite_target, "--operator", "ann") as address:
        page = signed_in(browser, address, viewport={"width": 390, "height": 844})
        page.goto(address.split("?")[0] + "?run=shop")
        assert page.locator("details.filters").get_attribute("open") is None  # folded away
        assert "run: shop" in page.locator("details.filters summary").inner_text()
        first = page.locator(f"li#{shop[0]}")
        box = first.bounding_box()
        assert box is not None
        assert box["y"] + box["height"] <= 844  # the first screen shows a ticket
        assert page.locator("li.row").count() == 12
        assert page.evaluate("document.documentElement.scrollWidth") <= 390
        with page.expect_navigation():
            first.locator("a.open").click()
        with page.expect_navigation():
            page.locator(f"section#{shop[0]} button.approve").click()
        # The next ticket of the same filter comes up, on its card, and the last one is named.
        assert f"/approvals/{shop[1]}?" in page.url
        assert "run=shop" in page.url
        assert "Approved pay in run shop-0" in page.locator("p.ok").inner_text()
        assert page.locator(f"section#{shop[1]}").count() == 1
        with page.expect_navigation():
            page.locator("a", has_text="Back to the inbox, as filtered").click()
        assert page.locator("li.row").count() == 11
    found = ledger.approval(shop[0])
    assert found is not None
    assert (found.state, found.decided_by) == ("approved", "ann")


def test_an_escalated_runs_action_in_doubt_is_settled_on_its_page_at_phone_width(
    browser: Any, sqlite_target: Target
) -> None:
    import call4agents as c4a

    ledger = c4a.init(sqlite_target.open())

    @c4a.effect(name="wire", kind="irreversible", escalate_on=("in_doubt",))
    def wire(amount: int) -> str:
        raise TimeoutError("the bank did not answer")

    with c4a.run("esc-7"), pytest.raises(c4a.Escalated):
        wire(500)
    [record] = ledger.in_doubt()
    with console(sqlite_target, "--operator", "ann") as address:
        page = signed_in(browser, address, viewport={"width": 390, "height": 844})
        page.goto(address.split("?")[0] + "doubt?tool=wire")
        assert "1 in doubt match." in page.locator("main").inner_text()
        page.goto(address.split("?")[0] + "run?id=esc-7")
        assert "Escalation hand-off" in page.locator("main").inner_text()
        card = page.locator(f"section#k{record.key[:12]}")
        card.locator("input[value=did_not_happen]").check()
        card.locator("input[name=note]").fill("the bank has no such transfer")
        with page.expect_navigation():
            card.locator("button.settle").click()
        assert "/run?id=esc-7" in page.url  # back on the run's page
        said = page.locator("p.ok").inner_text()
        assert "Settled wire in run esc-7: it did not happen." in said
        assert page.locator("section.doubt").count() == 0
        assert page.evaluate("document.documentElement.scrollWidth") <= 390
    settled = ledger.find(record.key)
    assert settled is not None
    assert (settled.state, settled.resolved_by) == ("failed", "ann")
