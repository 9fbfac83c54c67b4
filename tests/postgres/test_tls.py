"""TLS for real: a private PostgreSQL server that accepts only encrypted, password-checked
connections, reached with the awkward password and a URL carrying the TLS parameters.

The machine's shared server runs without TLS, so this module starts a throwaway server of its
own (tests/postgres/helpers.py) with a certificate authority and certificates made for it.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import sys
import tempfile
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

import call4agents as c4a
from call4agents.facade import cli
from tests.conftest import Target
from tests.postgres.helpers import give_to_owner, run, throwaway_server, unavailable
from tests.postgres.test_urls import ENCODED, PASSWORD, assert_hidden

ROLE = "c4a_tls"


@dataclass
class TlsServer:
    port: int
    ca: Path  # the certificate authority that signed the server's certificate
    other_ca: Path  # one that did not

    def url(self, query: str, host: str = "localhost") -> str:
        return f"postgresql+psycopg://{ROLE}:{ENCODED}@{host}:{self.port}/postgres?{query}"

    def verified(self, host: str = "localhost") -> str:
        return self.url(f"sslmode=verify-full&sslrootcert={urllib.parse.quote(str(self.ca))}", host)


def _certificates(folder: Path) -> None:
    """A CA, a server certificate it signed for localhost, and an unrelated second CA."""
    key = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"
    for ca in ("ca", "other_ca"):
        _openssl(f"req -x509 {key} -days 2 -keyout {ca}.key -out {ca}.crt -subj /CN={ca}", folder)
    _openssl(f"req {key} -keyout server.key -out server.csr -subj /CN=localhost", folder)
    (folder / "san.ext").write_text("subjectAltName=DNS:localhost\n")
    _openssl(
        "x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2"
        " -extfile san.ext -out server.crt",
        folder,
    )


def _openssl(arguments: str, folder: Path) -> None:
    run(["openssl", *arguments.split()], folder)


@pytest.fixture(scope="module")
def tls_server() -> Iterator[TlsServer]:
    if shutil.which("openssl") is None:
        unavailable("a private TLS server needs openssl")
    folder = Path(tempfile.mkdtemp(prefix="c4a-tls-"))
    try:
        _certificates(folder)
        (folder / "password").write_text(PASSWORD + "\n")
        give_to_owner(folder, *folder.iterdir())
        (folder / "server.key").chmod(0o600)
        with throwaway_server(
            listen="localhost",
            user=ROLE,
            auth=["--auth-local=trust", "--auth-host=scram-sha-256"],
            initdb_args=[f"--pwfile={folder / 'password'}"],
            # Only encrypted connections with the right password get in.
            hba="hostssl all all 127.0.0.1/32 scram-sha-256\n"
            "hostssl all all ::1/128 scram-sha-256\n",
            settings={
                "ssl": "on",
                "ssl_cert_file": str(folder / "server.crt"),
                "ssl_key_file": str(folder / "server.key"),
            },
        ) as server:
            yield TlsServer(server.port, folder / "ca.crt", folder / "other_ca.crt")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _encrypted_sessions(ledger: c4a.Ledger) -> list[tuple[bool, str]]:
    """(ssl, version) of every session the role has open on the server, the ledger's included."""
    with ledger.engine.connect() as conn:
        rows = conn.exec_driver_sql(
            "SELECT s.ssl, coalesce(s.version, '') FROM pg_stat_ssl s"
            " JOIN pg_stat_activity a USING (pid) WHERE a.usename = current_user"
        ).all()
    return [(bool(r[0]), str(r[1])) for r in rows]


def test_a_verified_tls_connection_with_the_awkward_password_runs_effects(
    tls_server: TlsServer,
) -> None:
    ledger = c4a.Ledger(tls_server.verified())
    try:
        calls: list[str] = []

        @c4a.effect(name="send_email", ledger=ledger)
        def send_email(to: str) -> str:
            calls.append(to)
            return "sent"

        with c4a.run("tls", ledger=ledger):
            assert send_email("bob@example.com") == "sent"
        with c4a.run("tls", ledger=ledger):
            assert send_email("bob@example.com") == "sent"  # a repeat, on a kept connection
        assert calls == ["bob@example.com"]
        sessions = _encrypted_sessions(ledger)
        assert sessions
        assert all(ssl and version.startswith("TLS") for ssl, version in sessions)
        assert_hidden(ledger.url + repr(ledger))
    finally:
        ledger.close()


def test_doctor_reports_the_encryption_and_hides_the_password(
    tls_server: TlsServer, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["migrate", "--url", tls_server.verified()]) == 0
    assert cli.main(["doctor", "--url", tls_server.verified()]) == 0
    out = capsys.readouterr().out
    assert "OK    tls" in out
    assert "the connection is encrypted (TLS" in out
    assert_hidden(out)


def test_a_server_certificate_from_another_authority_is_refused_clearly(
    tls_server: TlsServer, capsys: pytest.CaptureFixture[str]
) -> None:
    wrong = tls_server.url(f"sslmode=verify-full&sslrootcert={tls_server.other_ca}")
    with pytest.raises(c4a.LedgerError, match="certificate verify failed") as refused:
        c4a.Ledger(wrong)
    assert_hidden(str(refused.value))
    assert cli.main(["doctor", "--url", wrong]) != 0
    printed = capsys.readouterr()
    assert "certificate verify failed" in printed.out
    assert_hidden(printed.out + printed.err)


def test_a_host_the_certificate_does_not_name_is_refused(tls_server: TlsServer) -> None:
    with pytest.raises(c4a.LedgerError, match="does not match host name") as refused:
        c4a.Ledger(tls_server.verified(host="127.0.0.1"))
    assert_hidden(str(refused.value))


def test_a_url_without_tls_is_turned_away_by_this_server(tls_server: TlsServer) -> None:
    with pytest.raises(c4a.LedgerError, match="no encryption") as refused:
        c4a.Ledger(tls_server.url("sslmode=disable"))
    assert_hidden(str(refused.value))


def test_a_child_process_opens_its_own_tls_connections(
    tls_server: TlsServer, tmp_path: Path
) -> None:
    script = tmp_path / "child.py"
    script.write_text(
        "import sys\nimport call4agents as c4a\n"
        "ledger = c4a.Ledger(sys.argv[1])\n"
        "@c4a.effect(name='ping', ledger=ledger)\n"
        "def ping() -> str:\n    return 'pong'\n"
        "with c4a.run('tls-child', ledger=ledger):\n    print(ping())\n"
    )
    with contextlib.closing(c4a.Ledger(tls_server.verified())) as parent:
        done = subprocess.run(
            [sys.executable, str(script), tls_server.verified()],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "pong"
        assert [e.state for e in parent.effects(run_id="tls-child")] == ["succeeded"]


def test_doctor_warns_of_an_unencrypted_connection_to_another_host(
    pg_target: Target, capsys: pytest.CaptureFixture[str]
) -> None:
    # libpq dials hostaddr but names the server by host: a remote-looking URL to this machine.
    base = make_url(pg_target.url)
    remote = f"postgresql+psycopg://{base.username}@db.example.internal:{base.port or 5432}/"
    remote += f"{base.database}?hostaddr=127.0.0.1&sslmode=disable"
    cli.main(["doctor", "--url", remote, "--schema", str(pg_target.schema)])
    out = capsys.readouterr().out
    assert "WARN  tls" in out
    assert "not encrypted to db.example.internal" in out
    assert "sslmode=verify-full" in out
