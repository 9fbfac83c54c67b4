"""Undo: newest first, each undo once-only across a SIGKILL, everything not undone reported."""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path
from typing import Any

import pytest

import call4agents as c4a
from call4agents.engine import undos
from call4agents.facade.cli import main
from tests.conftest import Target, run_child

CHILD = Path(__file__).with_name("run_controls_child.py")


def child(target: Target, *args: str) -> Any:
    done = run_child(CHILD, *args, env=target.env())
    return done


def world(path: Path) -> list[str]:
    return path.read_text().splitlines()


def outcomes(report: dict[str, Any]) -> list[tuple[int, str]]:
    return [(i["args"]["amount"], i["outcome"]) for i in report["items"]]


def test_undo_killed_between_undos_continues_where_it_stopped(
    target: Target, tmp_path: Path
) -> None:
    out = tmp_path / "world.txt"
    assert child(target, "act", "order-1", str(out)).returncode == 0
    killed = child(target, "undo", "order-1", str(out), "before_third_undo")
    assert killed.returncode == -signal.SIGKILL
    assert world(out)[4:] == ["refund 4", "refund 3"]  # newest first, then the kill

    again = child(target, "undo", "order-1", str(out))
    assert again.returncode == 0, again.stderr
    report = json.loads(again.stdout)
    assert report["status"] == "undone"
    assert outcomes(report) == [
        (4, "already_undone"),
        (3, "already_undone"),
        (2, "undone"),
        (1, "undone"),
    ]
    assert world(out)[4:] == ["refund 4", "refund 3", "refund 2", "refund 1"]  # each once
    assert report["items"][2]["undo_result"]["refund_id"] == "re_2"

    third = json.loads(child(target, "undo", "order-1", str(out)).stdout)
    assert {o for _, o in outcomes(third)} == {"already_undone"}
    assert len(world(out)) == 8  # nothing reversed twice
    ledger = target.open()
    status = ledger.run_status("order-1")
    assert status is not None
    assert status.status == "undone"
    undos = [r for r in ledger.effects("order-1") if r.tool == "undo:charge"]
    assert [r.state for r in undos] == ["succeeded"] * 4


def test_undo_killed_inside_an_undo_is_in_doubt_and_never_repeated(
    target: Target, tmp_path: Path
) -> None:
    out = tmp_path / "world.txt"
    assert child(target, "act", "order-2", str(out)).returncode == 0
    killed = child(target, "undo", "order-2", str(out), "inside_third_undo")
    assert killed.returncode == -signal.SIGKILL
    assert world(out)[4:] == ["refund 4", "refund 3", "refund 2"]

    report = json.loads(child(target, "undo", "order-2", str(out)).stdout)
    assert report["status"] == "partly_undone"
    assert outcomes(report) == [
        (4, "already_undone"),
        (3, "already_undone"),
        (2, "undo_in_doubt"),  # it refunded, but the ledger cannot know: reported, not re-run
        (1, "undone"),
    ]
    assert "may or may not have happened" in report["items"][2]["detail"]
    assert world(out)[4:] == ["refund 4", "refund 3", "refund 2", "refund 1"]

    # A person checks the provider and records that the refund happened; the run is then undone.
    ledger = target.open()
    [doubt] = ledger.in_doubt()
    assert doubt.tool == "undo:charge"
    ledger.resolve(doubt.key, happened=True, result={"refund_id": "re_2"}, by="ann")
    final = json.loads(child(target, "undo", "order-2", str(out)).stdout)
    assert final["status"] == "undone"
    assert len(world(out)) == 8


class Shop:
    """In-process tools: one with an undo that fails once, one without undo, one in doubt."""

    def __init__(self) -> None:
        self.log: list[str] = []
        self.cancel_fails = True

        def cancel(result: str, *, order: str) -> str:
            if self.cancel_fails:
                raise ValueError("the warehouse refused the cancellation")
            self.log.append(f"cancel {order}")
            return f"cancelled {result}"

        def unsend(result: dict[str, str], **arguments: Any) -> None:
            self.log.append(f"unsend {result['id']} to {arguments['to']}")

        @c4a.effect(name="shop.ship", undo=cancel)
        def ship(order: str) -> str:
            self.log.append(f"ship {order}")
            return f"shipment-{order}"

        @c4a.effect(name="shop.email", undo=unsend)
        def email(to: str) -> dict[str, str]:
            self.log.append(f"email {to}")
            return {"id": "msg-1"}

        @c4a.effect(name="shop.post")
        def post(text: str) -> str:
            self.log.append(f"post {text}")
            return "posted"

        @c4a.effect(name="shop.pay")
        def pay(amount: int) -> str:
            raise TimeoutError("the bank did not answer")

        @c4a.effect(name="shop.lookup")
        def lookup(q: str) -> str:
            raise ValueError("no such order")

        self.ship, self.email, self.post, self.pay, self.lookup = ship, email, post, pay, lookup

    def act(self, run_id: str) -> None:
        with c4a.run(run_id):
            self.ship("o-1")
            self.email("bob@example.com")
            self.post("hello")
            for tool, arg in ((self.pay, 5), (self.lookup, "x")):
                with pytest.raises((TimeoutError, ValueError)):
                    tool(arg)


def test_undo_reports_what_it_did_not_reverse(ledger: c4a.Ledger) -> None:
    shop = Shop()
    shop.act("shop-1")
    report = ledger.undo("shop-1")
    assert report.status == "partly_undone"
    assert not report.complete
    got = [(i.tool, i.outcome) for i in report.items]
    assert got == [  # newest first; the failed lookup did not act, so it is not listed
        ("shop.pay", "in_doubt"),
        ("shop.post", "no_undo"),
        ("shop.email", "undone"),
        ("shop.ship", "undo_failed"),
    ]
    assert "warehouse refused" in report.items[3].detail
    assert "no undo registered for shop.post" in report.items[1].detail
    assert shop.log[-1] == "unsend msg-1 to bob@example.com"
    assert "shop.post" in report.text()
    assert "undo_failed" in report.text()

    # A failed undo did not act, so a second undo retries it; the email is not unsent twice.
    shop.cancel_fails = False
    again = ledger.undo("shop-1")
    assert [(i.tool, i.outcome) for i in again.items][2:] == [
        ("shop.email", "already_undone"),
        ("shop.ship", "undone"),
    ]
    assert shop.log.count("unsend msg-1 to bob@example.com") == 1
    assert shop.log.count("cancel o-1") == 1
    status = ledger.run_status("shop-1")
    assert status is not None
    assert status.status == "partly_undone"
    assert status.details["undo"]["items"][0]["tool"] == "shop.pay"


def test_undo_with_undos_given_for_a_process_that_did_not_define_them(ledger: c4a.Ledger) -> None:
    shop = Shop()
    shop.act("shop-2")
    removed: list[str] = []
    report = ledger.undo(
        "shop-2",
        undos={"shop.post": lambda result, text: removed.append(f"{result}:{text}")},
    )
    assert ("shop.post", "undone") in [(i.tool, i.outcome) for i in report.items]
    assert removed == ["posted:hello"]


def test_undo_unknown_run_is_an_error(ledger: c4a.Ledger) -> None:
    with pytest.raises(c4a.LedgerError, match="no actions recorded for run 'nope'"):
        ledger.undo("nope")


def cli(target: Target, *argv: str) -> int:
    full = [*argv, "--url", target.url, *(["--schema", target.schema] if target.schema else [])]
    return main(full)


def test_cli_undo(
    target: Target, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: Any
) -> None:
    # The registry is per process: forget "charge" from an earlier test's import.
    monkeypatch.delitem(undos._registry, "charge", raising=False)
    out = tmp_path / "world.txt"
    assert child(target, "act", "order-3", str(out)).returncode == 0
    # This process never defined "charge": nothing is reversed, and the report says why.
    assert cli(target, "undo", "order-3") == 1
    text = capsys.readouterr().out
    assert "Run order-3: partly undone" in text
    assert text.count("no undo registered for charge in this process") == 4
    assert "4 action(s) not reversed" in text
    assert world(out) == ["charge 1", "charge 2", "charge 3", "charge 4"]

    # --import brings the tools' undo= functions in; the module is this test's child script,
    # loaded with the arguments it expects.
    mod = tmp_path / "shop_tools.py"
    mod.write_text(
        "import sys\n"
        f"sys.argv = ['x', 'define', 'order-3', {str(out)!r}]\n"
        f"exec(open({str(CHILD)!r}).read())\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))  # the command adds the working folder
    monkeypatch.delitem(sys.modules, "shop_tools", raising=False)  # a fresh import each time
    monkeypatch.setenv("C4A_TEST_URL", target.url)
    monkeypatch.setenv("C4A_TEST_SCHEMA", target.schema or "")
    assert cli(target, "undo", "order-3", "--import", "shop_tools", "--json") == 0
    report = json.loads(capsys.readouterr().out)
    assert report["status"] == "undone"
    assert [i["outcome"] for i in report["items"]] == ["undone"] * 4
    assert world(out)[4:] == ["refund 4", "refund 3", "refund 2", "refund 1"]
    assert cli(target, "show", "order-3") == 0
    shown = capsys.readouterr().out
    assert "undo:charge" in shown
    assert "Run ended: undone (every action was reversed)" in shown
