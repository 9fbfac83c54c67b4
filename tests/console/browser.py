"""The console served by a real ``call4agents console`` process, and Debian's Chromium to drive it.

Playwright launches the system browser (never a downloaded one). Without /usr/bin/chromium the
tests skip with the reason; under CI=true they fail instead.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.conftest import Target

CHROMIUM = os.environ.get("C4A_TEST_CHROMIUM", "/usr/bin/chromium")


def chromium_path() -> str:
    problem = None
    if not (Path(CHROMIUM).exists() or shutil.which(CHROMIUM)):
        problem = f"no Chromium at {CHROMIUM} (apt-get install chromium)"
    else:
        try:
            import playwright  # noqa: F401
        except ImportError:
            problem = "playwright is not installed (uv sync --all-packages)"
    if problem:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true but the browser tests cannot run: {problem}", pytrace=False)
        pytest.skip(problem)
    return CHROMIUM


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def console(target: Target, *options: str) -> Iterator[str]:
    """Start ``call4agents console`` on a free port; yields the address it printed."""
    port = free_port()
    argv = [sys.executable, "-m", "call4agents", "console", "--url", target.url]
    argv += ["--schema", target.schema] if target.schema else []
    argv += ["--port", str(port), *options]
    process = subprocess.Popen(
        argv, env=target.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        found = re.search(r"Open (http://\S+)", line)
        if not found:
            process.kill()
            raise AssertionError(f"the console did not start: {line}{process.communicate()[1]}")
        _wait_listening(port)
        yield found.group(1)
    finally:
        process.terminate()
        try:
            process.wait(timeout=3)  # a browser keep-alive can hold a graceful stop
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _wait_listening(port: int) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise AssertionError(f"the console never listened on port {port}")
