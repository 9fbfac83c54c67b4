"""TLS for real: a private PostgreSQL server that accepts only encrypted, password-checked
connections, reached with the awkward password and a URL carrying the TLS parameters.

The machine's shared server runs without TLS, so this module starts its own throwaway server
(initdb and pg_ctl, as the ``postgres`` user when the tests run as root) on a free port.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
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
from tests.postgres.helpers import unavailable
from tests.postgres.test_urls import ENCODED, PASSWORD, assert_hidden

PG_BIN = Path("/usr/lib/postgresql")
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


def _bin(name: str) -> str:
    found = sorted(PG_BIN.glob(f"*/bin/{name}")) or [Path(p) for p in [shutil.which(name)] if p]
    if not found or shutil.which("openssl") is None:
        unavailable(f"a private TLS server needs PostgreSQL's {name} and openssl")
    return str(found[-1])


def _as_owner(*command: str) -> list[str]:
    """PostgreSQL refuses to run as root: run its tools as the postgres user then."""
    if os.geteuid() != 0:
        return list(command)
    if shutil.which("runuser") is None:
        unavailable("running PostgreSQL's tools as root needs runuser")
    return ["runuser", "-u", "postgres", "--", *command]


def _run(command: list[str], cwd: Path) -> None:
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"{command[0]} failed: {done.stdout}{done.stderr}"


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
    _run(["openssl", *arguments.split()], folder)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def tls_server() -> Iterator[TlsServer]:
    initdb, pg_ctl = _bin("initdb"), _bin("pg_ctl")
    root = Path(tempfile.mkdtemp(prefix="c4a-tls-"))
    data = root / "data"
    try:
        _certificates(root)
        (root / "password").write_text(PASSWORD + "\n")
        if os.geteuid() == 0:
            shutil.chown(root, "postgres")
            for item in root.iterdir():
                shutil.chown(item, "postgres")
        (root / "server.key").chmod(0o600)
        password = f"--pwfile={root / 'password'}"
        # No fsync anywhere: a throwaway server must not flood the disk other tests' leases
        # and commits share.
        auth = ["--auth-local=trust", "--auth-host=scram-sha-256", "--no-sync"]
        _run(_as_owner(initdb, "-D", str(data), "-U", ROLE, password, *auth), root)
        # Only encrypted connections with the right password get in.
        (data / "pg_hba.conf").write_text(
            "hostssl all all 127.0.0.1/32 scram-sha-256\nhostssl all all ::1/128 scram-sha-256\n"
        )
        port = _free_port()
        options = (
            f"-p {port} -k {root} -c listen_addresses=localhost -c ssl=on -c fsync=off"
            f" -c ssl_cert_file={root / 'server.crt'} -c ssl_key_file={root / 'server.key'}"
        )
        _run(
            _as_owner(
                pg_ctl, "-D", str(data), "-o", options, "-w", "-l", str(root / "log"), "start"
            ),
            root,
        )
        try:
            yield TlsServer(port, root / "ca.crt", root / "other_ca.crt")
        finally:
            _run(_as_owner(pg_ctl, "-D", str(data), "-m", "immediate", "stop"), root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


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
