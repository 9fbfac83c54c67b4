"""Shared pieces of the PostgreSQL tests: worker processes, the outbox, an admin connection, and
throwaway servers of a test's own (initdb, or pg_basebackup for a standby, and pg_ctl on a free
port), for what the shared server cannot be: crashed, encrypted, replicated, behind a pooler."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import psycopg
import pytest

if TYPE_CHECKING:
    # Only named here: the suite's conftest imports every agent framework (tests/forked.py),
    # seconds that `python -m tests.postgres.helpers` (scripts/postgres.sh) must not pay twice.
    from tests.conftest import Target

WORKER = Path(__file__).with_name("worker.py")


def plain(url: str) -> str:
    """The URL for bare psycopg (no SQLAlchemy driver name)."""
    return url.replace("postgresql+psycopg://", "postgresql://", 1)


def admin(target: Target) -> psycopg.Connection[Any]:
    return psycopg.connect(plain(target.url), autocommit=True)


def spawn(
    target: Target,
    run_id: str,
    outbox: Path,
    keys: Sequence[str],
    *,
    prefix: Sequence[str] = (),
    **env: str,
) -> subprocess.Popen[str]:
    """Start worker.py on ``keys``; ``prefix`` goes before the interpreter (e.g. unshare)."""
    return subprocess.Popen(
        [*prefix, sys.executable, str(WORKER), run_id, str(outbox), *keys],
        env=dict(target.env(), **env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def report(proc: subprocess.Popen[str], timeout: float = 120) -> dict[str, Any]:
    """The worker's JSON report, with its exit code and the tail of its stderr."""
    out, err = proc.communicate(timeout=timeout)
    try:
        found: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        found = {}
    return {**found, "code": proc.returncode, "stderr": err[-3000:]}


def deliveries(outbox: Path) -> list[dict[str, Any]]:
    if not outbox.exists():
        return []
    return [json.loads(line) for line in outbox.read_text().splitlines()]


def wait_for(path: Path, proc: subprocess.Popen[str] | None = None, timeout: float = 60) -> None:
    """Until ``path`` exists (the worker's tool started); fail if the worker ended first."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"the worker ended before {path.name}: {proc.communicate()}")
        if time.monotonic() > deadline:
            pytest.fail(f"{path.name} never appeared")
        time.sleep(0.01)


def unavailable(reason: str) -> NoReturn:
    """Skip, saying why; under CI=true fail instead, so CI never passes by skipping."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI=true but this test cannot run here: {reason}", pytrace=False)
    pytest.skip(reason)


PG_BIN = Path("/usr/lib/postgresql")


def pg_program(name: str) -> str:
    """The newest installed version's server program ``name`` (initdb, pg_ctl, ...), else one
    on PATH, else skip saying what is missing."""
    found = sorted(PG_BIN.glob(f"*/bin/{name}")) or [Path(p) for p in [shutil.which(name)] if p]
    if not found:
        unavailable(f"a throwaway PostgreSQL server needs {name} (apt-get install postgresql)")
    return str(found[-1])


def as_owner(*command: str) -> list[str]:
    """PostgreSQL refuses to run as root: run its programs as the postgres user then."""
    if os.geteuid() != 0:
        return list(command)
    if shutil.which("runuser") is None:
        unavailable("running PostgreSQL's programs as root needs runuser")
    return ["runuser", "-u", "postgres", "--", *command]


def give_to_owner(*paths: Path) -> None:
    """Files the server (or its tools) must read or write, when they run as postgres."""
    if os.geteuid() == 0:
        for path in paths:
            shutil.chown(path, "postgres")


# How long a server's start or promotion may take: minutes on a loaded 2-core machine, where
# pg_ctl's own default (60 s) has run out.
WAIT = 600


def run(command: list[str], cwd: Path) -> None:
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=WAIT + 60)
    assert done.returncode == 0, f"{command[0]} failed: {done.stdout}{done.stderr}"


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on now (``host`` ::1 also shows the machine has IPv6 loopback)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@dataclass
class Server:
    """A throwaway PostgreSQL server: its data folder, port, superuser and start options."""

    root: Path  # owned by the server's user; the data folder, log and socket are inside
    port: int
    user: str
    options: str  # what pg_ctl passes to the server (port, socket folder, settings)

    @property
    def data(self) -> Path:
        return self.root / "data"

    def url(self, host: str = "127.0.0.1", database: str = "postgres") -> str:
        return f"postgresql+psycopg://{self.user}@{host}:{self.port}/{database}"

    def start(self) -> None:
        log = str(self.root / "log")
        self._ctl("-o", self.options, "-w", "-t", str(WAIT), "-l", log, "start")

    def stop(self) -> None:
        """As a crash stops it: no checkpoint, no goodbye to a standby or a client."""
        self._ctl("-m", "immediate", "stop")

    def crash_and_restart(self) -> None:
        self.stop()
        self.start()

    def promote(self) -> None:
        self._ctl("-w", "-t", str(WAIT), "promote")

    def _ctl(self, *args: str) -> None:
        run(as_owner(pg_program("pg_ctl"), "-D", str(self.data), *args), self.root)


@contextlib.contextmanager
def throwaway_server(**options: Any) -> Iterator[Server]:
    """``start_server(**options)``, stopped and deleted when the block ends."""
    server = start_server(**options)
    try:
        yield server
    finally:
        _remove(server.root)


def start_server(
    *,
    listen: str = "127.0.0.1",
    port: int | None = None,
    settings: Mapping[str, str] | None = None,
    user: str = "c4a",
    auth: Sequence[str] = ("--auth=trust",),
    initdb_args: Sequence[str] = (),
    hba: str | None = None,
    standby_of: Server | None = None,
) -> Server:
    """A PostgreSQL server of the caller's own on a free port, started, nothing left behind if
    it fails (never the shared one: these are crashed, restarted, reconfigured); the caller
    removes it, or uses ``throwaway_server``.

    ``listen``: its listen_addresses; ``settings``: more ``-c`` settings; ``user``, ``auth``,
    ``initdb_args``: its superuser and how initdb sets it and the authentication up; ``hba``:
    pg_hba.conf in place of initdb's; ``standby_of``: a streaming standby of that server, made
    with pg_basebackup instead of initdb (its settings are the primary's; initdb's pg_hba.conf
    lets replication connections in from this machine)."""
    root = Path(tempfile.mkdtemp(prefix="c4a-pg-"))
    try:
        give_to_owner(root)
        port = port or free_port("::1" if listen == "::1" else "127.0.0.1")
        # No fsync: a throwaway server must not flood the disk other tests' commits share; a
        # crash of the server (stop -m immediate) is not one of the machine, so what was
        # written survives it.
        named = {"listen_addresses": listen, "fsync": "off", **(settings or {})}
        options = f"-p {port} -k {root} " + " ".join(f"-c {k}={v}" for k, v in named.items())
        server = Server(root, port, user, options)
        if standby_of is None:
            initdb = [pg_program("initdb"), "-D", str(server.data), "-U", user, *auth]
            run(as_owner(*initdb, *initdb_args, "--no-sync"), root)
        else:
            source = ["-h", "127.0.0.1", "-p", str(standby_of.port), "-U", standby_of.user]
            backup = [pg_program("pg_basebackup"), *source, "-D", str(server.data)]
            run(as_owner(*backup, "-R", "-X", "stream"), root)
        if hba is not None:
            (server.data / "pg_hba.conf").write_text(hba)
        server.start()
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise
    return server


def _remove(root: Path) -> None:
    stop = [pg_program("pg_ctl"), "-D", str(root / "data"), "-m", "immediate", "stop"]
    with contextlib.suppress(AssertionError):  # a test may have stopped it already
        run(as_owner(*stop), root)
    shutil.rmtree(root, ignore_errors=True)


def _main(argv: Sequence[str]) -> int:
    """``start``: a throwaway server for a whole test run (scripts/postgres.sh), left running,
    with a database ``test``; prints its port and folder. ``stop FOLDER``: stop and delete it.
    Exit status 3 (and the reason) where this machine cannot run one."""
    if argv[:1] == ["stop"] and len(argv) == 2:
        _remove(Path(argv[1]))
        return 0
    if list(argv) != ["start"]:
        print("usage: python -m tests.postgres.helpers start | stop FOLDER", file=sys.stderr)
        return 2
    # The suite's two workers, their child processes and pools stay well under 200 sessions.
    try:
        server = start_server(user="postgres", settings={"max_connections": "200"})
    except pytest.skip.Exception as skipped:
        print(skipped.msg)
        return 3
    try:
        with psycopg.connect(plain(server.url()), autocommit=True) as conn:
            conn.execute("CREATE DATABASE test")
    except BaseException:
        _remove(server.root)
        raise
    print(server.port, server.root)
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
