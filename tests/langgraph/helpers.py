"""Helpers of the LangGraph tests: a ledger and checkpoints on one backend, the outbox, children.

On PostgreSQL the ledger gets its own schema (tests/conftest.py) and the checkpoints their own
fresh database, created for the test and dropped after it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import call4agents as c4a
from tests.conftest import Target, run_child

HERE = Path(__file__).parent
SECRET = "test-secret-" + "x" * 40


@dataclass
class Backend:
    """Where one test keeps its ledger (``target``) and its LangGraph checkpoints."""

    kind: str
    target: Target
    checkpoints: str  # an SQLite file, or a PostgreSQL conninfo

    def ledger(self) -> c4a.Ledger:
        return self.target.open(lease=600, wait=30)

    def env(self, **extra: str) -> dict[str, str]:
        return {
            **self.target.env(),
            "CALL4AGENTS_SECRET": SECRET,
            "LG_SAVER": self.kind,
            "LG_CKPT": self.checkpoints,
            **extra,
        }

    @contextlib.contextmanager
    def saver(self) -> Iterator[Any]:
        if self.kind == "sqlite":
            from langgraph.checkpoint.sqlite import SqliteSaver

            conn = sqlite3.connect(self.checkpoints, check_same_thread=False)
            try:
                yield SqliteSaver(conn)
            finally:
                conn.close()
        else:
            from langgraph.checkpoint.postgres import PostgresSaver

            with PostgresSaver.from_conn_string(self.checkpoints) as saver:
                saver.setup()
                yield saver

    @contextlib.asynccontextmanager
    async def asaver(self) -> AsyncIterator[Any]:
        if self.kind == "sqlite":
            from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

            async with AsyncSqliteSaver.from_conn_string(self.checkpoints) as saver:
                yield saver
        else:
            from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

            async with AsyncPostgresSaver.from_conn_string(self.checkpoints) as saver:
                await saver.setup()
                yield saver


def _plain(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://", 1)


@contextlib.contextmanager
def checkpoint_database(ledger_url: str) -> Iterator[str]:
    import psycopg

    server = _plain(ledger_url)
    name = "c4a_lg_" + uuid.uuid4().hex[:12]
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield server.rsplit("/", 1)[0] + "/" + name
    finally:
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


class Outbox:
    """The outside world: one line per email, written by the tool, never by the ledger."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def send(self, to: str, body: str) -> str:
        with self.path.open("a") as f:
            f.write(json.dumps({"to": to, "body": body, "pid": os.getpid()}) + "\n")
        return f"sent to {to}"

    def lines(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        return [json.loads(line) for line in self.path.read_text().splitlines()]

    def __len__(self) -> int:
        return len(self.lines())


@dataclass
class Child:
    """A finished child process; ``report`` is its last stdout line as JSON (None if killed)."""

    returncode: int
    stdout: str
    stderr: str

    @property
    def report(self) -> Any:
        lines = self.stdout.strip().splitlines()
        return json.loads(lines[-1]) if lines and lines[-1].startswith("{") else None

    @property
    def killed(self) -> bool:
        return self.returncode == -signal.SIGKILL


def child(script: str, *args: str, env: dict[str, str]) -> Child:
    """Run a child script of this folder in a fresh interpreter."""
    done = run_child(HERE / script, *args, env=env)
    return Child(done.returncode, done.stdout, done.stderr)
