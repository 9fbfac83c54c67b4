"""`call4agents quickstart` prints counts it measured from real, SIGKILLed child processes."""

from __future__ import annotations

import re
import subprocess
import sys

from tests.conftest import Target


def quickstart(*args: str) -> dict[str, tuple[int, str]]:
    done = subprocess.run(
        [sys.executable, "-m", "call4agents.cli", "quickstart", *args],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    rows = {}
    for line in done.stdout.splitlines():
        found = re.match(r"\s+(.+?)\s{2,}(\d+)\s{2}(.+)$", line)
        if found:
            rows[found.group(1)] = (int(found.group(2)), found.group(3))
    return rows


def test_core_rows() -> None:
    rows = quickstart()
    assert rows["killed right after sending, without Call4Agents"][0] == 2
    assert rows["killed right after sending, with Call4Agents"][0] == 1
    emails, what = rows["killed inside the tool, with Call4Agents"]
    assert emails == 1
    assert "in doubt" in what
    for label, (count, _) in rows.items():  # every integration: 2 without, 1 with
        assert count == (2 if "without" in label else 1), label


def test_on_postgres(pg_target: Target) -> None:
    pg_target.open().close()
    url = pg_target.url + f"?options=-csearch_path%3D{pg_target.schema}"
    rows = quickstart("--url", url)
    assert rows["killed right after sending, with Call4Agents"][0] == 1
