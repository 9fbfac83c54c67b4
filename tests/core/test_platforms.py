"""Windows and macOS: the core works without POSIX's names; `power` reaches the platter on macOS.

This machine runs Linux, so the other platforms are played in fresh interpreters: one with the
names a Windows Python lacks deleted before the core is imported (``tests/core/posixless.py``),
running the core's SQLite behaviour tests and importing every integration; one that reads
``sys.platform`` as ``darwin``, where the code branches on it. The CI runs the real thing on
macOS and Windows (``.github/workflows/tests.yml``).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import call4agents as c4a
from call4agents.model import platform
from call4agents.storage import _files
from tests.conftest import PORTABLE

ROOT = Path(__file__).parents[2]
# The integrations installed here: all of them from 3.11, on 3.10 those scripts/python3.10 installs.
INTEGRATIONS = ("call4agents_mcp", "call4agents_openai_agents")
NOT_ON_310 = ("call4agents_langgraph", "call4agents_pydantic_ai", "call4agents_jobs")
linux_only = pytest.mark.skipif(
    sys.platform != "linux", reason="plays another platform on Linux; the CI runs the real one"
)


def _python(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )


def _fullfsync(url: str, durability: str) -> list[int]:
    with c4a.Ledger(url, durability=durability) as ledger, ledger.engine.connect() as conn:
        return [
            int(conn.exec_driver_sql(f"PRAGMA {name}").scalar() or 0)
            for name in ("fullfsync", "checkpoint_fullfsync")
        ]


@pytest.mark.slow
@linux_only
def test_the_core_behaves_the_same_without_posix_names(tmp_path: Path) -> None:
    """Effects, approvals and doubt on SQLite: no fork hooks, user ids, O_NOFOLLOW or SIGKILL."""
    # The files of PORTABLE that act on a ledger (canonical arguments and the codec touch no OS).
    files = [
        f"tests/core/{name}.py" for name in ("test_effects", "test_approvals", "test_lost_claim")
    ]
    assert all(f.removeprefix("tests/") in PORTABLE for f in files)
    files.append(f"{Path(__file__).relative_to(ROOT).as_posix()}::{_LOCKED}")
    done = _python(
        "-m", "tests.core.posixless", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist",
        "-q", "-k", "not postgres", f"--basetemp={tmp_path / 'pytest'}", *files,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    summary = done.stdout.strip().splitlines()[-1]
    assert re.match(r"\d+ passed", summary), summary
    assert not re.search("failed|error", summary), summary


@pytest.mark.slow
@linux_only
def test_every_integration_imports_without_posix_names() -> None:
    modules = ["call4agents", "call4agents.integration", "call4agents.facade.quickstart"]
    for name in INTEGRATIONS + (NOT_ON_310 if sys.version_info >= (3, 11) else ()):
        modules += [name, f"{name}.quickstart"] if name != "call4agents_jobs" else [name]
    done = _python("-m", "tests.core.posixless", "imports", *modules)
    assert done.returncode == 0, done.stderr[-4000:]
    assert done.stdout.split() == modules


@linux_only
def test_without_posix_owners_a_loose_ledger_file_is_not_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On Windows (no owner, mode bits made up) the link and plain-file checks alone are made:
    the same file is refused here, where a POSIX owner exists (tests/core/test_ledger_files.py)."""
    script = (
        "import os, sys, call4agents as c4a\n"
        "from call4agents.facade.cli import main\n"
        "folder = sys.argv[1]\n"
        "with c4a.Ledger(f'sqlite:///{folder}/ledger.db') as ledger:\n"
        "    ledger.secret  # made on first use\n"
        "for name in ('ledger.db', 'secret'):\n"
        "    os.chmod(os.path.join(folder, name), 0o666)\n"
        "with c4a.Ledger(f'sqlite:///{folder}/ledger.db') as ledger:\n"
        "    assert len(ledger.secret) >= 32\n"
        "os.environ['CALL4AGENTS_SECRET_FILE'] = os.path.join(folder, 'named')\n"
        "with c4a.Ledger(f'sqlite:///{folder}/other.db') as ledger:\n"
        "    assert ledger.secret == b'n' * 40\n"
        "del os.environ['CALL4AGENTS_SECRET_FILE']\n"
        "sys.exit(main(['--url', f'sqlite:///{folder}/ledger.db', 'doctor']))\n"
    )
    named = tmp_path / "named"  # an operator's CALL4AGENTS_SECRET_FILE, writable by all
    named.write_text("n" * 40)
    named.chmod(0o666)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CALL4AGENTS_SECRET")}
    done = subprocess.run(
        [sys.executable, "-c", f"from tests.core import posixless; posixless.strip()\n{script}",
         str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=240, env=env,
    )  # fmt: skip
    assert re.search("SKIP +permissions +not checked on this platform", done.stdout), done.stderr
    assert "refusing" not in done.stdout + done.stderr
    with pytest.raises(c4a.LedgerError, match="other users may write it"):
        _files.check_ledger_files(tmp_path / "ledger.db")  # this interpreter has POSIX owners
    monkeypatch.delenv("CALL4AGENTS_SECRET")
    monkeypatch.setenv("CALL4AGENTS_SECRET_FILE", str(named))
    with pytest.raises(c4a.LedgerError, match="refusing CALL4AGENTS_SECRET_FILE"):
        c4a.Ledger(f"sqlite:///{tmp_path / 'third.db'}").secret  # noqa: B018


@linux_only
def test_power_asks_for_fullfsync_on_macos(tmp_path: Path) -> None:
    script = (
        "import json, sys\n"
        "sys.platform = 'darwin'\n"
        "from tests.core.test_platforms import _fullfsync\n"
        "print(json.dumps([_fullfsync(f'sqlite:///{sys.argv[1]}/{d}.db', d)"
        " for d in ('power', 'process')]))\n"
    )
    done = _python("-c", script, str(tmp_path))
    assert done.returncode == 0, done.stderr[-4000:]
    assert json.loads(done.stdout) == [[1, 1], [0, 0]]


def test_this_platform_asks_for_fullfsync_only_where_fsync_stops_short(tmp_path: Path) -> None:
    expected = [1, 1] if sys.platform == "darwin" else [0, 0]
    assert _fullfsync(f"sqlite:///{tmp_path / 'ledger.db'}", "power") == expected
    assert platform.full_fsync() is (sys.platform == "darwin")


def test_a_killed_child_exits_with_the_code_the_quickstart_expects() -> None:
    done = _python("-c", "from call4agents.model import platform; platform.kill_this_process()")
    assert done.returncode == platform.killed_exit_code() != 0


_LOCKED = "test_a_ledger_another_process_holds_is_a_one_line_error"
HOLD = (
    "import sqlite3, sys\n"
    "conn = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
    "conn.execute('BEGIN EXCLUSIVE')\n"
    "print('held', flush=True)\n"
    "sys.stdin.read()  # until the test closes it\n"
)


def test_a_ledger_another_process_holds_is_a_one_line_error(tmp_path: Path) -> None:
    """SQLite's own lock (POSIX advisory locks, LockFileEx on Windows) as one line."""
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    ledger = c4a.Ledger(url, busy_timeout=0.2)

    @c4a.effect(ledger=ledger)
    def send() -> str:
        return "sent"

    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(tmp_path / "ledger.db")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline() == "held\n"
        with pytest.raises(c4a.LedgerError) as acting, c4a.run("locked"):
            send()
        with pytest.raises(c4a.LedgerError) as opening:
            c4a.Ledger(url, busy_timeout=0.2)
    finally:
        holder.communicate("")
        ledger.close()
    assert str(acting.value) == "the ledger database failed: database is locked"
    assert str(opening.value).startswith(f"cannot open the ledger at {url}: database is locked.")
    assert "\n" not in str(opening.value)
