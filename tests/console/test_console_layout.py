"""Every console page in Debian's Chromium at a phone's and a desktop's width, light and dark:
no horizontal scroll, and no axe-core violation (axe-core from npm, pinned in tests/console/axe).

One ledger holds something for every page (tickets, one with a redacted card and a long
argument, an in-doubt action, a settled and retried one, an undoable run, an escalation, the
audit, a dead letter); the console is served in this process so the undo tool is loaded.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import uvicorn

import call4agents as c4a
from call4agents.console import ConsoleSettings, create_app
from call4agents.storage import dead_letters
from tests.console.browser import chromium_path, free_port
from tests.console.helpers import make_in_doubt, open_ticket

pytestmark = pytest.mark.slow
AXE = Path(__file__).parent / "axe" / "node_modules" / "axe-core" / "axe.min.js"
TOKEN = "layout-token"
SIZES = {"phone": (390, 844), "desktop": (1440, 900)}
LONG = "a-very-long-subject-line-without-any-space-" * 6
CRAFTED = '<script>alert(1)</script><img src=x onerror=alert(2)>\'" onfocus=alert(3) x="'


def axe_path() -> Path:
    if not AXE.exists():
        problem = "axe-core is not installed (npm ci --prefix tests/console/axe)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true but the accessibility tests cannot run: {problem}", pytrace=False)
        pytest.skip(problem)
    return AXE


def seed(ledger: c4a.Ledger) -> dict[str, str]:
    """Something for every page; returns the addresses that need an id."""
    c4a.init(ledger)
    waiting = open_ticket("refund-7")
    open_ticket("refund-8", amount=90)

    @c4a.effect(name="send_note", kind="write")
    def send_note(to: str, subject: str) -> str:
        return f"sent to {to}"

    @c4a.effect(name="ship", kind="write", undo=lambda result, **_: None)
    def ship(order: int, label: str) -> str:
        return f"shipment-{order}"

    with c4a.run("ship-1"):
        ship(5, LONG)
        send_note("carol@example.com", LONG)
    make_in_doubt("mail-3")
    settled = make_in_doubt("mail-4")
    ledger.resolve(settled.key, happened=False, by="ann", note="the provider has no such mail")
    with c4a.run("esc-1"), pytest.raises(c4a.Escalated):
        c4a.escalate("customer asked for a person", what_remains=["call them back"])

    @c4a.effect(name="wire", kind="irreversible", escalate_on=("in_doubt",))
    def wire(amount: int) -> str:
        raise TimeoutError("the bank did not answer")

    with c4a.run("esc-2"), pytest.raises(c4a.Escalated):
        wire(500)  # escalated on its action in doubt: the hand-off links to its card

    # Markup crafted into a tool's name, a run id and arguments: the pages run with the CSP
    # bypassed, so a script that became markup would run here (the test watches for dialogs).
    @c4a.effect(name="pay" + CRAFTED, kind="irreversible", approval=True)
    def crafted(note: str) -> str:
        return CRAFTED

    with c4a.run("run" + CRAFTED), pytest.raises(c4a.ApprovalRequired):
        crafted(CRAFTED)
    make_in_doubt("run" + CRAFTED)
    approved = open_ticket("refund-9", amount=12)
    ledger.approve(approved.ticket, by="ann", reason="known customer")
    open_ticket("refund-9", amount=12, card="9999-9999-9999-9999")  # "differs" beside the yes
    dead_letters.record(
        ledger.store, "https://hooks.example.com/x", json.dumps({"event": "ticket"}), "timeout", 5
    )
    return {"ticket": waiting.ticket, "decided": approved.ticket}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, str]]]:
    folder = tmp_path_factory.mktemp("layout")
    ledger = c4a.Ledger(f"sqlite:///{folder / 'ledger.db'}")
    ids = seed(ledger)
    port = free_port()
    app = create_app(ledger, ConsoleSettings(operator="ann", token=TOKEN))
    server = uvicorn.Server(uvicorn.Config(app, port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}", ids
    finally:
        server.should_exit = True
        thread.join(10)
        ledger.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    path = chromium_path()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=path, args=["--no-sandbox"])
        yield launched
        launched.close()


def pages(ids: dict[str, str]) -> dict[str, tuple[str, int]]:
    """Each page's address and the status it answers with."""
    return {
        "inbox": ("/", 200),
        "inbox cards": ("/?view=cards", 200),
        "inbox filtered": ("/?run=refund&waited=5m", 200),
        "ticket from a filter": (f"/approvals/{ids['ticket']}?run=refund", 200),
        "ticket": (f"/approvals/{ids['ticket']}", 200),
        "decided ticket": (f"/approvals/{ids['decided']}", 200),
        "in doubt": ("/doubt", 200),
        "in doubt filtered": ("/doubt?tool=send_email&why=mail", 200),
        "run in doubt": ("/run?id=mail-3", 200),
        "runs": ("/runs", 200),
        "run": ("/run?id=ship-1", 200),
        "undo": ("/run/undo?id=ship-1", 200),
        "settled run": ("/run?id=mail-4", 200),
        "escalated run": ("/run?id=esc-1", 200),
        "escalated in doubt, from a filtered list": (
            "/run?id=esc-2&back=%2Fruns%3Fstate%3Descalated",
            200,
        ),
        "crafted run": (f"/run?id={quote('run' + CRAFTED, safe='')}", 200),
        "crafted search": (f"/?q={quote(CRAFTED, safe='')}", 200),
        "after ticked tickets": (
            f"/?bulk=approve&done={ids['decided']}&refused={ids['ticket']}",
            200,
        ),
        "audit": ("/audit", 200),
        "health": ("/health", 200),
        "unknown ticket": ("/approvals/nope", 404),
        "unknown address": ("/no/such/page", 404),
        "bad filter": ("/runs?state=bogus", 400),
    }


def check(page: Any, name: str, shots: Path | None = None) -> list[str]:
    """What is wrong with the page as shown: a horizontal scroll, or axe-core's violations."""
    if shots is not None:
        page.screenshot(path=str(shots / f"{name.replace(' ', '-')}.png"), full_page=True)
    problems = []
    # Folded filters are opened, so their fields are measured and checked too.
    page.evaluate("document.querySelectorAll('details').forEach((d) => { d.open = true; })")
    width = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    if width[0] > width[1]:
        problems.append(f"{name}: {width[0]} px wide in a {width[1]} px window")
    page.add_script_tag(path=str(axe_path()))
    found = page.evaluate("axe.run(document).then(r => r.violations)")
    problems += [
        f"{name}: {v['id']} ({v['impact']}): {v['help']} at {[n['target'] for n in v['nodes']][:3]}"
        for v in found
    ]
    return problems


@pytest.mark.parametrize("scheme", ["light", "dark"])
@pytest.mark.parametrize("size", list(SIZES))
def test_every_page_fits_and_has_no_axe_violation(
    browser: Any,
    served: tuple[str, dict[str, str]],
    size: str,
    scheme: str,
    tmp_path: Path,
) -> None:
    address, ids = served
    shots = tmp_path if size == "phone" else None  # kept to look at: the test's own folder
    width, height = SIZES[size]
    context = browser.new_context(
        viewport={"width": width, "height": height}, color_scheme=scheme, bypass_csp=True
    )
    page = context.new_page()
    alerts: list[str] = []
    page.on("dialog", lambda dialog: (alerts.append(dialog.message), dialog.dismiss()))
    try:
        page.goto(f"{address}/?token={TOKEN}")
        problems = []
        for name, (path, status) in pages(ids).items():
            answer = page.goto(address + path)
            assert answer is not None
            assert answer.status == status, f"{name}: {answer.status}"
            problems += check(page, name, shots)
        signed_out = context.browser.new_context(
            viewport={"width": width, "height": height}, color_scheme=scheme, bypass_csp=True
        ).new_page()
        answer = signed_out.goto(address + "/")
        assert answer is not None
        assert answer.status == 401
        problems += check(signed_out, "sign in", shots)
        assert not problems, "\n".join(problems)
        assert alerts == []  # no crafted script ran
    finally:
        context.close()
