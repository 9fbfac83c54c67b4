"""`scripts/test` with no PostgreSQL URL runs on a server of its own (scripts/postgres.sh)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.postgres.helpers import unavailable

ROOT = Path(__file__).parents[2]
# What scripts/test does around its pytest runs, with a query in their place.
SCRIPT = """
set -euo pipefail
source scripts/postgres.sh
echo "root=$C4A_PG_ROOT"
"$PYTHON" -c 'import os, psycopg
url = os.environ["CALL4AGENTS_TEST_POSTGRES_URL"].replace("+psycopg", "")
print("answer", psycopg.connect(url).execute("select 41 + 1").fetchone()[0])'
"""


def test_with_no_url_the_test_command_runs_on_a_throwaway_server_and_removes_it() -> None:
    found = list(Path("/usr/lib/postgresql").glob("*/bin/initdb")) or shutil.which("initdb")
    if not found:
        unavailable("no initdb: apt-get install postgresql")
    env = {k: v for k, v in os.environ.items() if k != "CALL4AGENTS_TEST_POSTGRES_URL"}
    env["PYTHON"] = sys.executable
    done = subprocess.run(
        ["bash", "-c", SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    said, root, answer = done.stdout.splitlines()
    assert said.startswith("PostgreSQL tests: on a throwaway server of this run, 127.0.0.1:")
    assert said.endswith("stopped and deleted after it")
    assert answer == "answer 42"
    assert not Path(root.removeprefix("root=")).exists()  # stopped and deleted at exit


def test_with_a_url_the_test_command_uses_that_server() -> None:
    env = {**os.environ, "CALL4AGENTS_TEST_POSTGRES_URL": "postgresql+psycopg://u@h/db"}
    done = subprocess.run(
        ["bash", "-c", "source scripts/postgres.sh"], cwd=ROOT, env=env, capture_output=True,
        text=True, check=False,
    )  # fmt: skip
    assert (done.returncode, done.stdout) == (
        0,
        "PostgreSQL tests: on the server of CALL4AGENTS_TEST_POSTGRES_URL\n",
    )
