"""A fresh SQLite ledger for each test of a framework's own suite, for the OnceOnly plugins.

Imported by its bare name (this folder on ``PYTHONPATH``): in those runs ``tests`` is the
framework's own test package, not this repository's.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from pathlib import Path

import pytest

import call4agents as c4a


@pytest.fixture(autouse=True)
def _fresh_ledger(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    folder: Path = tmp_path_factory.mktemp("ledger")
    ledger = c4a.init(f"sqlite:///{folder / 'ledger.db'}")
    try:
        yield
    finally:
        ledger.close()
        default = importlib.import_module("call4agents.engine.default")
        default._default_ledger = None
