"""`call4agents quickstart` prints counts it measured from real, SIGKILLed child processes."""

from __future__ import annotations

import io
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from call4agents.facade import quickstart as qs
from tests.conftest import Target
from tests.console.browser import free_port

SCRIPT = Path(sys.executable).with_name("call4agents")  # the console script in this venv
ROOT = Path(__file__).parents[1]


def run_quickstart(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRIPT), "quickstart", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def rows_of(stdout: str) -> dict[str, tuple[int, str]]:
    rows = {}
    for line in stdout.splitlines():
        found = re.match(r"\s+(.+?)\s{2,}(\d+)\s{2}(.+)$", line)
        if found:
            rows[found.group(1)] = (int(found.group(2)), found.group(3))
    return rows


def _uv_dir() -> list[str]:
    """The folder of the uv this checkout uses, for the clone's PATH: its install then comes from
    uv's cache, where a clone on its own would first download uv into its ./.tools."""
    found = shutil.which("uv") or shutil.which("uv", path=str(ROOT / ".tools" / "bin"))
    return [str(Path(found).parent)] if found else []


def _clone(into: Path) -> dict[str, str]:
    """A fresh clone of this checkout's HEAD, and the environment of a user's shell for it."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs git and a git checkout to clone")
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(into)], check=True, timeout=600)
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "CALL4AGENTS_URL")}
    venv_bin = str(Path(sys.executable).parent)  # not ours: the clone makes its own .venv
    path = [p for p in env.get("PATH", "").split(os.pathsep) if p and p != venv_bin]
    env["PATH"] = os.pathsep.join([*_uv_dir(), *path])
    return env


def _printed_commands(stdout: str) -> list[str]:
    """Every whole command the closing lines print: those on their own line and in backticks."""
    tail = stdout.split("\nDone in")[1]
    own = [line.strip() for line in tail.splitlines() if line.startswith("  ")]
    quoted = [q for q in re.findall(r"`([^`]+)`", tail) if "--url" in q]
    return own + quoted


def _serves_the_runs(command: str, cwd: Path, env: dict[str, str], run_id: str) -> None:
    """Start the printed console command (on a free port: 8470 may be taken here), open the
    address it prints, and find the quickstart's run on its runs page; then stop it."""
    argv = [*shlex.split(command), "--port", str(free_port())]
    process = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        found = re.search(r"Open (http://\S+)", process.stdout.readline())
        assert found is not None, "the console printed no address"
        port = int(argv[-1])
        while process.poll() is None:  # it prints the address just before it listens
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.1)
        opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor())
        with opener.open(found.group(1), timeout=60) as first:  # the token becomes a cookie
            assert first.status == 200
        with opener.open(found.group(1).split("?")[0] + "runs", timeout=60) as runs:
            assert run_id in runs.read().decode()
    finally:
        process.terminate()
        process.wait(timeout=60)


def _shell(command: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(command, shell=True, cwd=cwd, env=env, capture_output=True, text=True)
    assert done.returncode == 0, (command, done.stderr)
    return done


@pytest.fixture
def clone(tmp_path: Path) -> Iterator[Path]:
    """A folder for the clone, removed after the test: its .venv is hundreds of megabytes, and
    pytest keeps its last few temporary folders."""
    yield tmp_path / "clone"
    shutil.rmtree(tmp_path / "clone", ignore_errors=True)


@pytest.mark.slow
def test_a_fresh_clone_runs_the_quickstart_and_every_command_it_prints(clone: Path) -> None:
    env = _clone(clone)
    done = subprocess.run(
        ["bash", "scripts/quickstart"], cwd=clone, env=env, capture_output=True, text=True,
        timeout=3600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    # Cold, it says what it installs as it goes instead of going quiet.
    assert "Installing the workspace into ./.venv" in done.stderr
    assert "Installed: .venv/bin/call4agents" in done.stderr
    rows = rows_of(done.stdout)
    assert rows["killed right after sending, without Call4Agents"][0] == 2
    assert rows["killed right after sending, with Call4Agents"][0] == 1
    emails, what = rows["killed inside the tool, with Call4Agents"]
    assert emails == 1
    assert "in doubt" in what
    for label, (count, _) in rows.items():  # every integration: 2 without, 1 with
        assert count == (2 if "without" in label else 1), label
    frameworks = {label.split(",")[0] for label in rows if not label.startswith("killed")}
    old = ".venv/bin/python -c 'import sys; print(sys.version_info < (3, 11))'"
    old_python = subprocess.run(old, shell=True, cwd=clone, capture_output=True, text=True)
    newer = set() if old_python.stdout.strip() == "True" else {"LangGraph", "Pydantic AI"}
    assert frameworks == {"OpenAI Agents SDK", "MCP client", *newer}
    # Each command it prints runs as printed, from the same folder, in a shell with no uv,
    # no activated environment and no call4agents on PATH.
    commands = _printed_commands(done.stdout)
    assert [c.split()[1] for c in commands] == ["runs", "show", "console", "doubt"], commands
    assert all(c.startswith(".venv/bin/call4agents ") for c in commands), commands
    run_id = commands[1].split()[2]
    runs, show, doubt = (_shell(c, clone, env) for c in (commands[0], commands[1], commands[3]))
    assert run_id in runs.stdout  # the in-doubt run is listed
    assert "found in the outbox" in show.stdout  # how the person settled it
    assert "No actions in doubt." in doubt.stdout  # settled by then
    _serves_the_runs(commands[2], clone, env, run_id)
    assert (clone / ".c4a" / "quickstart.db").exists()


def test_on_postgres(pg_target: Target, tmp_path: Path) -> None:
    pg_target.open().close()
    url = pg_target.url + f"?options=-csearch_path%3D{pg_target.schema}"
    done = run_quickstart(tmp_path, "--url", url)
    assert done.returncode == 0, done.stderr
    assert rows_of(done.stdout)["killed right after sending, with Call4Agents"][0] == 1


@pytest.mark.parametrize(
    "url", ["postgresql+psycopg://ann:hunter2@127.0.0.1:1/ledger", "mysql://host/db"]
)
def test_a_bad_url_is_one_line_before_any_child_starts(url: str, tmp_path: Path) -> None:
    done = run_quickstart(tmp_path, "--url", url)
    assert done.returncode == 2
    assert done.stdout == ""  # not even the title: nothing was started
    [line] = done.stderr.splitlines()
    assert line.startswith("call4agents: error: ")
    assert "hunter2" not in line


def test_title_at_once_and_each_row_as_its_scenario_finishes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.chdir(tmp_path)

    def first() -> list[qs.Row]:
        assert "Call4Agents quickstart" in out.getvalue()  # the title came before any scenario
        return [qs.Row("first", 1, "finished first")]

    def second() -> list[qs.Row]:  # ends only once the first row is on the screen
        deadline = time.monotonic() + 60
        while "finished first" not in out.getvalue():
            assert time.monotonic() < deadline, "the first row was held back"
            time.sleep(0.01)
        return [qs.Row("second", 1, "finished second", run_id="run-2")]

    monkeypatch.setattr(qs, "_scenarios", lambda workdir, url: [second, first])
    assert qs.main([]) == 0
    shown = out.getvalue()
    assert shown.index("finished first") < shown.index("finished second") < shown.index("Next")
    assert "show run-2 --url sqlite:///.c4a/quickstart.db" in shown


def test_the_next_step_names_the_script_as_this_folder_reaches_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = tmp_path / ".venv" / "bin" / "call4agents"  # what scripts/quickstart runs
    script.parent.mkdir(parents=True)
    script.write_text("")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", [str(script), "quickstart"])
    assert qs._prog() == ".venv/bin/call4agents"
