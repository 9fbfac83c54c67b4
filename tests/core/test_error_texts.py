"""A tool's error is always storable, and its credentials are masked in every common spelling.

An error text that a database cannot store (a lone surrogate from a file name read with
``surrogateescape``; a NUL, which PostgreSQL's text type refuses) used to make the write of a
definite failure fail, so an action that did not act stayed in doubt forever.
"""

from __future__ import annotations

import base64
import re
import urllib.parse
from collections.abc import Callable

import pytest

import call4agents as c4a
from call4agents.model.canonical import scrub

SECRET = "sk_live_X/Y+z=42"


class _Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no text")


@pytest.mark.parametrize(
    "error",
    [
        ValueError("cannot read report-\udcff.csv"),  # os.listdir on a Latin-1 name
        ValueError("provider said b\x00d"),
        ValueError("mixed \udc80 and \x00 " + "x" * 5000),
        _Unprintable(),
    ],
    ids=["lone-surrogate", "nul", "both-and-long", "unprintable"],
)
def test_a_definite_failure_is_recorded_as_failed_whatever_its_text(
    ledger: c4a.Ledger, error: Exception
) -> None:
    calls: list[int] = []

    @c4a.effect(ledger=ledger)
    def upload(name: str) -> str:
        calls.append(1)
        if len(calls) == 1:
            raise error
        return "uploaded"

    with c4a.run("r", ledger=ledger):
        with pytest.raises(type(error)):
            upload("report")
        [record] = ledger.effects("r")
        assert record.state == "failed"
        assert record.error is not None
        assert len(record.error) <= 2000
        assert "\x00" not in record.error
        record.error.encode("utf-8")  # no lone surrogate left
        assert upload("report") == "uploaded"  # failed means "did not act": it runs again
    assert len(calls) == 2
    assert [r.state for r in ledger.effects("r")] == ["succeeded"]


def _basic(user: str) -> str:
    return base64.b64encode(f"{user}:{SECRET}".encode()).decode()


SPELLINGS: dict[str, Callable[[], str]] = {
    "verbatim": lambda: f"denied for {SECRET}",
    "percent-encoded": lambda: f"GET /v1/charges?key={urllib.parse.quote(SECRET, safe='')} 401",
    "percent-lower-hex": lambda: (
        "GET /v1?key="
        + re.sub("%[0-9A-F]{2}", lambda m: m.group().lower(), urllib.parse.quote(SECRET, safe=""))
    ),
    "form-encoded": lambda: "body: key=" + urllib.parse.quote_plus(SECRET, safe=""),
    "basic-auth": lambda: f"sent Authorization: Basic {_basic('shop')} and got 401",
    "basic-auth-urlsafe": lambda: (
        "token " + base64.urlsafe_b64encode(f"shop:{SECRET}".encode()).decode().rstrip("=")
    ),
    "json-escaped": lambda: 'payload {"key": "sk_live_X\\/Y+z=42"}'.replace("\\/", "/"),
}


@pytest.mark.parametrize("spelling", list(SPELLINGS))
def test_a_credential_is_masked_in_its_common_spellings(spelling: str) -> None:
    text = SPELLINGS[spelling]()
    masked = scrub(text, [SECRET])
    assert "***" in masked
    assert SECRET not in masked
    assert urllib.parse.quote(SECRET, safe="").lower() not in masked.lower()
    assert "z%3d42" not in masked.lower()
    assert _basic("shop") not in masked


def test_text_without_the_secret_is_left_alone() -> None:
    text = "Authorization: Basic " + base64.b64encode(b"shop:other-value").decode()
    assert scrub(text, [SECRET]) == text


def test_an_encoded_credential_never_reaches_the_record(
    ledger: c4a.Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("C4A_TEST_PAYMENTS_KEY", SECRET)

    @c4a.effect(ledger=ledger, credentials={"api_key": "C4A_TEST_PAYMENTS_KEY"})
    def charge(amount: int, api_key: str) -> str:
        quoted = urllib.parse.quote(api_key, safe="")
        raise ValueError(f"401 for /v1/charges?key={quoted} with Basic {_basic('shop')}")

    with c4a.run("r", ledger=ledger), pytest.raises(ValueError):
        charge(5)
    [record] = ledger.effects("r")
    assert record.error == "ValueError: 401 for /v1/charges?key=*** with Basic ***"
