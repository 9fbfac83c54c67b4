"""Credentials are injected at call time and appear nowhere Call4Agents writes or prints."""

from __future__ import annotations

from pathlib import Path

import pytest

import call4agents as c4a
from call4agents.facade.cli import main
from tests.conftest import Target

SECRET_VALUE = "sk_live_Zq81_do_not_leak_7731"


def test_credential_never_reaches_the_record(
    sqlite_target: Target, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("C4A_TEST_PAYMENTS_KEY", SECRET_VALUE)
    ledger = c4a.init(sqlite_target.open())
    seen: list[str] = []

    @c4a.effect(name="charge", credentials={"api_key": "C4A_TEST_PAYMENTS_KEY"})
    def charge(amount: int, api_key: str) -> str:
        seen.append(api_key)
        if amount < 0:
            raise ValueError(f"rejected request signed with {api_key}")
        if amount == 0:
            raise TimeoutError(f"no answer for {api_key}")
        return "ch_1"

    @c4a.effect(name="refund", approval=True, credentials={"token": lambda: SECRET_VALUE})
    def refund(charge_id: str, token: str) -> str:
        return "re_1"

    texts: list[str] = []
    with c4a.run("r"):
        assert charge(5) == "ch_1"
        with pytest.raises(ValueError, match="rejected"):
            charge(-1)
        with pytest.raises(TimeoutError):
            charge(0)
        with pytest.raises(c4a.EffectInDoubt) as doubt:
            charge(0)
        texts.append(str(doubt.value))
        with pytest.raises(c4a.ApprovalRequired) as asked:
            refund("ch_1")
        texts.append(str(asked.value))
        texts.append(repr(asked.value.request.as_dict()))
        with pytest.raises(c4a.ConfigurationError, match="do not pass it"):
            charge(5, api_key="from-the-model")  # type: ignore[call-arg]
    assert seen == [SECRET_VALUE] * 3  # the tool did get it

    for args in (["show", "r"], ["doubt"], ["approvals"], ["show", "r", "--json"], ["runs"]):
        assert main([*args, "--url", sqlite_target.url]) in (0, 3)
    out = capsys.readouterr()
    texts += [out.out, out.err]
    texts += [r.error or "" for r in ledger.effects("r")]
    assert "ValueError: rejected request signed with ***" in texts
    assert all(SECRET_VALUE not in t for t in texts)
    ledger.close()
    folder = Path(sqlite_target.url.removeprefix("sqlite:///")).parent
    raw = b"".join(p.read_bytes() for p in folder.iterdir() if p.is_file())
    assert SECRET_VALUE.encode() not in raw


def test_missing_credential_is_a_clear_error(sqlite_target: Target) -> None:
    c4a.init(sqlite_target.open())

    @c4a.effect(name="charge", credentials={"api_key": "C4A_TEST_UNSET_VARIABLE"})
    def charge(amount: int, api_key: str) -> str:
        return "never"

    with c4a.run("r"), pytest.raises(c4a.ConfigurationError, match="C4A_TEST_UNSET_VARIABLE"):
        charge(1)
    with pytest.raises(c4a.ConfigurationError, match="not parameters"):
        c4a.effect(name="x", credentials={"nope": "X"})(lambda a: a)
