"""`call4agents quickstart` prints counts it measured from real, SIGKILLed child processes."""

from __future__ import annotations

import io
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from call4agents.facade import quickstart as qs
from tests.conftest import OLD_PYTHON, Target

SCRIPT = Path(sys.executable).with_name("call4agents")  # the console script in this venv


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


def test_core_rows_and_the_next_steps_work_as_printed(tmp_path: Path) -> None:
    done = run_quickstart(tmp_path)
    assert done.returncode == 0, done.stderr
    rows = rows_of(done.stdout)
    assert rows["killed right after sending, without Call4Agents"][0] == 2
    assert rows["killed right after sending, with Call4Agents"][0] == 1
    emails, what = rows["killed inside the tool, with Call4Agents"]
    assert emails == 1
    assert "in doubt" in what
    for label, (count, _) in rows.items():  # every integration: 2 without, 1 with
        assert count == (2 if "without" in label else 1), label
    frameworks = {label.split(",")[0] for label in rows if not label.startswith("killed")}
    newer = set() if OLD_PYTHON else {"LangGraph", "Pydantic AI"}
    assert frameworks == {"OpenAI Agents SDK", "MCP client", *newer}
    assert ("LangChain 1.x and Pydantic AI 2.x need Python" in done.stdout) is OLD_PYTHON
    # The closing commands run as printed, from the same folder, on the ledger the demo kept.
    steps = done.stdout.split("\nNext")[1].splitlines()[1:3]
    assert [s.split()[1] for s in steps] == ["runs", "show"], steps
    runs, show = (
        subprocess.run(s, shell=True, cwd=tmp_path, capture_output=True, text=True) for s in steps
    )
    assert runs.returncode == show.returncode == 0, runs.stderr + show.stderr
    assert steps[1].split()[2] in runs.stdout  # the in-doubt run is listed
    assert "found in the outbox" in show.stdout  # how the person settled it
    assert (tmp_path / ".c4a" / "quickstart.db").exists()


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
