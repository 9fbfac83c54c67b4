"""Fixtures of the LangGraph tests; the helpers they build on are in helpers.py."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import make_target
from tests.langgraph.helpers import SECRET, Backend, Outbox, checkpoint_database


@pytest.fixture(params=["sqlite", "postgres"])
def backend(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Backend]:
    monkeypatch.setenv("CALL4AGENTS_SECRET", SECRET)
    with contextlib.contextmanager(make_target)(request.param, tmp_path) as target:
        if request.param == "sqlite":
            yield Backend("sqlite", target, str(tmp_path / "checkpoints.db"))
            return
        with checkpoint_database(target.url) as conninfo:
            yield Backend("postgres", target, conninfo)


@pytest.fixture
def sqlite_backend(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Backend]:
    monkeypatch.setenv("CALL4AGENTS_SECRET", SECRET)
    with contextlib.contextmanager(make_target)("sqlite", tmp_path) as target:
        yield Backend("sqlite", target, str(tmp_path / "checkpoints.db"))


@pytest.fixture
def pg_backend(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Backend]:
    monkeypatch.setenv("CALL4AGENTS_SECRET", SECRET)
    with (
        contextlib.contextmanager(make_target)("postgres", tmp_path) as target,
        checkpoint_database(target.url) as conninfo,
    ):
        yield Backend("postgres", target, conninfo)


@pytest.fixture
def outbox(tmp_path: Path) -> Outbox:
    return Outbox(tmp_path / "outbox.jsonl")
