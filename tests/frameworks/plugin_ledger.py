"""A fresh SQLite ledger for each test of a framework's own suite, for the OnceOnly plugins.

Imported by its bare name (this folder on ``PYTHONPATH``): in those runs ``tests`` is the
framework's own test package, not this repository's.

Each test's ledger is a copy of one empty ledger the session created: a suite has a thousand
tests or more, and creating a ledger (its tables, indexes and triggers, each written to disk)
costs tens of milliseconds where a copy of the file costs a few. The copy is a ledger of its own,
as empty as a new one; only the key salt is the session's.
"""

from __future__ import annotations

import importlib
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

import call4agents as c4a

_empty: list[Path] = []  # the session's empty ledger, once made


def _empty_ledger(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not _empty:
        path: Path = tmp_path_factory.mktemp("empty") / "ledger.db"
        c4a.Ledger(f"sqlite:///{path}").close()
        _empty.append(path)
    return _empty[0]


@pytest.fixture(autouse=True)
def _fresh_ledger(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    path = tmp_path_factory.mktemp("ledger") / "ledger.db"
    shutil.copyfile(_empty_ledger(tmp_path_factory), path)
    ledger = c4a.init(f"sqlite:///{path}")
    try:
        yield
    finally:
        ledger.close()
        default = importlib.import_module("call4agents.engine.default")
        default._default_ledger = None
