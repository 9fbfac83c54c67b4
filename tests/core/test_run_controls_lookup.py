"""Read-before-write: a find_existing= hit is recorded as the result; a crash never makes two."""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path
from typing import Any

import pytest

import call4agents as c4a
from call4agents.engine.action import prepare
from tests.conftest import Target, run_child

CHILD = Path(__file__).with_name("run_controls_child.py")


class Tracker:
    """An issue tracker with no idempotency keys: search by text is all it offers."""

    def __init__(self) -> None:
        self.tickets: list[dict[str, str]] = []
        self.searched_with: list[str] = []

    def create(self, title: str) -> dict[str, str]:
        ticket = {"id": f"T-{len(self.tickets) + 1}", "title": title}
        self.tickets.append(ticket)
        return ticket

    def search(self, text: str) -> list[dict[str, str]]:
        self.searched_with.append(text)
        return [t for t in self.tickets if text in t["title"]]


def test_key_marker_is_stable_and_short(ledger: c4a.Ledger) -> None:
    seen: list[tuple[str, str]] = []

    @c4a.effect(name="mark")
    def mark(x: int) -> str:
        ctx = c4a.current()
        seen.append((c4a.key_marker(), ctx.idempotency_key))
        return c4a.key_marker()

    with c4a.run("r-1"):
        first = mark(1)
    marker, key = seen[0]
    assert first == marker == c4a.key_marker(key)
    assert marker.startswith("[c4a:")
    assert marker.endswith("]")
    assert len(marker) == 22
    assert key.removeprefix("c4a-").startswith(marker[5:-1])
    with pytest.raises(c4a.Call4AgentsError, match="only available inside a tool"):
        c4a.key_marker()


def test_find_existing_hit_is_recorded_and_the_tool_does_not_run(ledger: c4a.Ledger) -> None:
    tracker = Tracker()
    created: list[str] = []

    def find(title: str) -> dict[str, str] | None:
        assert c4a.current().tool == "open_ticket"  # asked inside the effect's context
        return c4a.find_marked(tracker.search(c4a.key_marker()), lambda t: t["title"])

    @c4a.effect(name="open_ticket", find_existing=find)
    def open_ticket(title: str) -> dict[str, str]:
        created.append(title)
        return tracker.create(f"{title} {c4a.key_marker()}")

    with c4a.run("r-2"):
        made = open_ticket("Printer on fire")  # nothing found: created, with the marker
        # A ticket this action would create, left by a process whose ledger write was lost.
        planned = prepare("open_ticket", {"title": "Refund"}, open_ticket.options)
        tracker.create(f"Refund {c4a.key_marker(planned.context(1).idempotency_key)}")
        found = open_ticket("Refund")
        again = open_ticket("Refund")
    assert created == ["Printer on fire"]
    assert len(tracker.tickets) == 2
    assert made == tracker.tickets[0]
    assert found == again == tracker.tickets[1]
    first, second = ledger.effects("r-2")
    assert first.result == made
    assert second.state == "succeeded"
    assert second.result == tracker.tickets[1]
    assert len(tracker.searched_with) == 2  # the repeat is served from the ledger


def test_async_find_existing(ledger: c4a.Ledger) -> None:
    tracker = Tracker()

    async def find(title: str) -> dict[str, str] | None:
        return c4a.find_marked(tracker.search(c4a.key_marker()), lambda t: t["title"])

    @c4a.effect(name="open_ticket_async", find_existing=find)
    async def open_ticket(title: str) -> dict[str, str]:
        return tracker.create(f"{title} {c4a.key_marker()}")

    async def main() -> tuple[Any, Any]:
        async with c4a.run("r-4"):
            return await open_ticket("A"), await open_ticket("A")

    first, second = asyncio.run(main())
    assert first == second
    assert len(tracker.tickets) == 1


@pytest.mark.parametrize(
    ("point", "expected_lines"),
    [("after_create", 1), ("after_intent", 1)],
)
def test_crash_then_resume_finds_instead_of_creating_again(
    target: Target, tmp_path: Path, point: str, expected_lines: int
) -> None:
    out = tmp_path / "world.txt"
    killed = run_child(CHILD, "ticket", "t-1", str(out), point, env=target.env())
    assert killed.returncode == -signal.SIGKILL
    resumed = run_child(CHILD, "ticket", "t-1", str(out), env=target.env())
    assert resumed.returncode == 0, resumed.stderr
    tickets = [line for line in out.read_text().splitlines() if line.startswith("ticket ")]
    assert len(tickets) == expected_lines  # one ticket, whichever moment the crash came
    result = json.loads(resumed.stdout)
    assert tickets[0] == f"ticket {result['title']}"
    [record] = target.open().effects("t-1")
    assert record.state == "succeeded"
    assert record.result == result
    if point == "after_create":
        assert record.resolved_by == "check"  # the finder settled the doubt: it happened
