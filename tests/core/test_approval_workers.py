"""Plain Python: a yes covers the arguments shown, once, across worker processes.

Plain Python has no saved state to edit; what can change is the call itself: the same action
(one key per order) called with another amount than the person saw. Workers race in real
processes on SQLite and PostgreSQL.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tests.conftest import Target, run_child

WORKER = Path(__file__).with_name("approval_worker.py")


def race(target: Target, folder: Path, *amounts: int) -> list[str]:
    """One worker process per amount, started together; what each printed."""
    names = [f"w{i}-{len(list(folder.glob('ready-*')))}" for i in range(len(amounts))]
    (folder / "workers").write_text(" ".join(names))
    env = target.env()
    with ThreadPoolExecutor(len(amounts)) as pool:
        done = list(
            pool.map(
                lambda job: run_child(WORKER, str(folder), job[0], str(job[1]), env=env),
                zip(names, amounts, strict=True),
            )
        )
    assert [d.returncode for d in done] == [0] * len(done), [d.stderr for d in done]
    return [d.stdout.strip() for d in done]


def refunds(folder: Path) -> list[str]:
    outbox = folder / "outbox"
    return outbox.read_text().splitlines() if outbox.exists() else []


def test_a_yes_runs_the_shown_arguments_once_and_never_others(
    target: Target, tmp_path: Path
) -> None:
    ledger = target.open()
    assert race(target, tmp_path, 10) == ["asked"]
    [shown] = ledger.approvals("refund-77")
    ledger.approve(shown.ticket, by="ann")
    assert sorted(race(target, tmp_path, 9999, 9999)) == ["asked", "asked"]
    assert refunds(tmp_path) == []  # 9999 was never shown: the yes for 10 is not spent on it
    assert sorted(race(target, tmp_path, 10, 10)) == ["ran", "ran"]  # one ran, one got its result
    assert race(target, tmp_path, 10) == ["ran"]
    assert refunds(tmp_path) == ["A-77 10"]
    [other] = [t for t in ledger.approvals("refund-77") if t.args["amount"] == 9999]
    assert other.state == "pending"


def test_a_later_no_wins_over_a_yes_not_yet_spent(target: Target, tmp_path: Path) -> None:
    ledger = target.open()
    race(target, tmp_path, 10)
    [shown] = ledger.approvals("refund-77")
    ledger.approve(shown.ticket, by="ann")
    ledger.deny(shown.ticket, by="lead", reason="duplicate refund")
    assert race(target, tmp_path, 10, 10) == ["denied", "denied"]
    assert refunds(tmp_path) == []
