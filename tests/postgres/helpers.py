"""Shared pieces of the PostgreSQL tests: worker processes, the outbox, an admin connection."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

import psycopg
import pytest

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
