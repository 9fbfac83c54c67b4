"""Values a user can pass by mistake get one clear Call4AgentsError, with nothing written or run."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import call4agents as c4a
from tests.conftest import Target


@pytest.mark.parametrize("value", [10**5000, -(10**5000)], ids=["huge", "huge-negative"])
def test_a_top_level_int_too_long_to_write_is_refused_like_a_nested_one(
    ledger: c4a.Ledger, value: int
) -> None:
    ran: list[int] = []

    @c4a.effect(ledger=ledger)
    def pay(amount: int) -> None:
        ran.append(amount)

    with c4a.run("r", ledger=ledger), pytest.raises(c4a.UnstableArguments) as refused:
        pay(value)
    assert "argument 'amount' is an integer too long" in str(refused.value)
    assert ran == []
    assert ledger.effects("r") == []


@pytest.mark.parametrize("run_id", ["job-\udcff", "job-\x00-1"], ids=["lone-surrogate", "nul"])
def test_a_run_id_no_database_can_store_is_refused(ledger: c4a.Ledger, run_id: str) -> None:
    with pytest.raises(c4a.ConfigurationError, match="NUL or a lone surrogate"):
        c4a.run(run_id, ledger=ledger)
    assert ledger.effects() == []


def test_a_key_built_from_a_redacted_value_cannot_be_reversed(ledger: c4a.Ledger) -> None:
    keys: dict[str, str] = {}

    @c4a.effect(ledger=ledger, redact=("pin",), key=lambda card, pin: f"{card}/{pin}")
    def unlock(card: str, pin: str) -> str:
        keys[pin] = c4a.current().idempotency_key
        return "ok"

    with c4a.run("r", ledger=ledger):
        unlock("c-1", "4821")
        unlock("c-1", "0007")
    assert len(set(keys.values())) == 2  # other pins are still other actions
    # The attack: try all 10,000 PINs against the key with the plain derivation of key=.
    from call4agents.engine.action import action_key
    from call4agents.model.canonical import canonical_json

    def guess(pin: str) -> str:
        material = "key:" + canonical_json("unlock", f"c-1/{pin}")
        return action_key("r", unlock.tool, None, material)

    found = {guess(f"{n:04d}") for n in range(10_000)}
    assert guess("4821") in found  # the attack would work on the plain derivation
    assert not found & {r.key for r in ledger.effects("r")}


def test_a_key_without_redaction_is_derived_as_before(ledger: c4a.Ledger) -> None:
    @c4a.effect(ledger=ledger, name="ship", key=lambda order: order)
    def ship(order: str) -> None:
        return None

    with c4a.run("r", ledger=ledger):
        ship("o-1")
    # Pinned: a change here would make every old run repeat its actions.
    [record] = ledger.effects("r")
    assert record.key == "07ad9bcf6d266a4a755c205c81d87062e864d747414034cb1d46b770e7f809e2"


def test_arguments_over_the_cap_are_refused_before_anything_runs(target: Target) -> None:
    ledger = c4a.init(target.open(max_args_bytes=64 * 1024))
    ran: list[int] = []

    @c4a.effect(ledger=ledger)
    def upload(blob: str) -> None:
        ran.append(len(blob))

    with c4a.run("r", ledger=ledger):
        with pytest.raises(c4a.ConfigurationError, match="over the ledger's max_args_bytes"):
            upload("x" * 70_000)
        upload("x" * 60_000)  # under the cap: runs and is recorded
    assert ran == [60_000]
    assert [r.state for r in ledger.effects("r")] == ["succeeded"]


# Root may write anywhere, so as root the child opens one ledger (loading every module it needs
# while it still may read them all), then becomes nobody before it tries the read-only folder.
_INIT_IN_READ_ONLY = """
import os, sys
import call4agents as c4a
c4a.init("sqlite:///" + sys.argv[1])
if os.geteuid() == 0:
    os.setgroups([])
    os.setgid(65534)
    os.setuid(65534)
os.chdir(sys.argv[2])
try:
    c4a.init()
except c4a.LedgerError as exc:
    print(exc)
"""


def test_init_in_a_read_only_folder_names_the_folder_and_the_way_out() -> None:
    # Outside pytest's owner-only temporary tree, so that nobody can reach the folder.
    with tempfile.TemporaryDirectory() as top:
        folder = Path(top) / "read-only"
        folder.mkdir()
        Path(top).chmod(0o755)
        folder.chmod(0o555)
        env = {k: v for k, v in os.environ.items() if k != "CALL4AGENTS_URL"}
        done = subprocess.run(
            [sys.executable, "-c", _INIT_IN_READ_ONLY, f"{top}/warm.db", str(folder)],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        assert (done.returncode, done.stderr) == (0, "")
        [line] = done.stdout.splitlines()
        assert line.startswith("cannot create the ledger .c4a/ledger.db: Permission denied in ")
        assert str(folder.resolve()) in line
        assert "Run from a folder you may write to" in line
        assert not (folder / ".c4a").exists()
