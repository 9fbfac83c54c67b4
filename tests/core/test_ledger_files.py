"""The files beside an SQLite ledger: planted or loosened ones are refused, damage is reported.

A ``ledger.db`` or ``secret`` that another user planted or may write in a shared folder would let
them sign approvals of their own ("paid 5000 to mallory"), so the ledger trusts only plain files of
its own user that nobody else may write, as ssh does with keys. ``doctor`` runs SQLite's integrity
check and says how to recover.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import call4agents as c4a
from call4agents.facade.cli import main

OTHER_UID = 65534  # "nobody"
as_root = pytest.mark.skipif(
    os.geteuid() != 0, reason="giving a file to another user (chown) needs root"
)


def _url(folder: Path) -> str:
    return f"sqlite:///{folder / 'ledger.db'}"


def _refusal(url: str) -> str:
    with pytest.raises(c4a.LedgerError) as caught:
        c4a.Ledger(url)
    return str(caught.value)


def test_a_new_ledger_and_its_secret_are_owner_only(tmp_path: Path) -> None:
    with c4a.Ledger(_url(tmp_path)) as ledger:
        assert len(ledger.secret) >= 32
        ledger.effects()
    for name in ("ledger.db", "ledger.db-wal", "ledger.db-shm", "secret"):
        path = tmp_path / name
        if path.exists():
            assert path.stat().st_mode & 0o077 == 0, name
            assert path.stat().st_uid == os.geteuid()


def test_a_ledger_file_others_may_write_is_refused(tmp_path: Path) -> None:
    c4a.Ledger(_url(tmp_path)).close()
    (tmp_path / "ledger.db").chmod(0o666)
    message = _refusal(_url(tmp_path))
    assert "other users may write it (mode 666)" in message
    assert f"chmod 600 {tmp_path / 'ledger.db'}" in message
    (tmp_path / "ledger.db").chmod(0o600)
    c4a.Ledger(_url(tmp_path)).close()  # fixed as the message says: it opens


def test_a_symlinked_ledger_file_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "elsewhere"
    c4a.Ledger(_url(real)).close()
    (tmp_path / "ledger.db").symlink_to(real / "ledger.db")
    assert "it is a symbolic link" in _refusal(_url(tmp_path))


@as_root
@pytest.mark.parametrize("name", ["ledger.db", "ledger.db-wal"])
def test_a_ledger_file_of_another_user_is_refused(tmp_path: Path, name: str) -> None:
    c4a.Ledger(_url(tmp_path)).close()
    planted = tmp_path / name
    planted.touch(mode=0o600)
    os.chown(planted, OTHER_UID, OTHER_UID)
    message = _refusal(_url(tmp_path))
    assert f"belongs to user id {OTHER_UID}" in message
    assert str(planted) in message


def _secret_refusal(folder: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.delenv("CALL4AGENTS_SECRET")
    with c4a.Ledger(_url(folder)) as ledger, pytest.raises(c4a.LedgerError) as caught:
        ledger.secret  # noqa: B018 - read on first use
    return str(caught.value)


def test_a_secret_others_may_read_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = tmp_path / "secret"
    secret.write_text("s" * 64)
    secret.chmod(0o644)
    message = _secret_refusal(tmp_path, monkeypatch)
    assert "other users may read it (mode 644)" in message


def test_a_symlinked_secret_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "secret").symlink_to("/etc/passwd")
    assert "it is a symbolic link" in _secret_refusal(tmp_path, monkeypatch)


@as_root
def test_a_secret_of_another_user_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = tmp_path / "secret"
    secret.write_text("s" * 64)
    secret.chmod(0o600)
    os.chown(secret, OTHER_UID, OTHER_UID)
    assert f"belongs to user id {OTHER_UID}" in _secret_refusal(tmp_path, monkeypatch)


def test_a_named_secret_file_may_be_a_link_but_not_writable_by_others(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = tmp_path / "mounted" / "key"
    real.parent.mkdir()
    real.write_text("k" * 64)
    real.chmod(0o600)
    link = tmp_path / "key-link"  # how an orchestrator mounts a secret
    link.symlink_to(real)
    monkeypatch.delenv("CALL4AGENTS_SECRET")
    monkeypatch.setenv("CALL4AGENTS_SECRET_FILE", str(link))
    with c4a.Ledger(_url(tmp_path)) as ledger:
        assert ledger.secret == b"k" * 64
    real.chmod(0o666)
    with c4a.Ledger(_url(tmp_path)) as ledger, pytest.raises(c4a.LedgerError, match="chmod 600"):
        ledger.secret  # noqa: B018
    monkeypatch.setenv("CALL4AGENTS_SECRET_FILE", str(tmp_path / "missing"))
    with c4a.Ledger(_url(tmp_path)) as ledger, pytest.raises(c4a.ConfigurationError):
        ledger.secret  # noqa: B018


def test_doctor_reports_a_damaged_file_and_how_to_recover(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = _url(tmp_path)
    with c4a.Ledger(url) as ledger:

        @c4a.effect(ledger=ledger)
        def note(i: int) -> str:
            return "x" * 500

        with c4a.run("fill", ledger=ledger):
            for i in range(300):
                note(i)
    db = tmp_path / "ledger.db"
    page = 4096
    assert db.stat().st_size > 20 * page
    with db.open("r+b") as f:  # the ledger is closed: nothing of ours holds the file
        f.seek(10 * page)  # a b-tree page's header: a leaf page's type, then garbage
        f.write(b"\x0d" + os.urandom(60))
    code = main(["doctor", "--url", url])
    out = capsys.readouterr().out
    assert code == 1
    assert "FAIL" in out
    assert "restore the last backup" in out
