"""Fixtures shared by the whole suite: a fresh ledger on every backend, and child processes.

PostgreSQL tests read the server from CALL4AGENTS_TEST_POSTGRES_URL and give each test its own
schema (made once per worker and emptied between tests: tests/schemas.py). Without that variable
they skip with the reason shown; with CI=true they fail instead, so a CI run can never pass by
silently testing SQLite alone.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import call4agents as c4a
from tests import forked, schemas

PG_ENV = "CALL4AGENTS_TEST_POSTGRES_URL"
TESTS = Path(__file__).parent

# LangChain 1.x and Pydantic AI 2.x need Python 3.11, and so do their integrations; the core, MCP
# and the Agents SDK run on 3.10. There the tests that drive those agents are left out (each
# run's header names them) and the tests of README blocks and examples skip theirs.
NEEDS_PY311 = "LangChain 1.x and Pydantic AI 2.x need Python 3.11"
PY311_ONLY = (
    "langgraph",
    "pydantic_ai",
    "core/test_run_controls_budget.py",
    "core/test_run_controls_pydantic_ai.py",
    "core/test_integration_settings.py",
    "mcp/test_run_controls.py",
    "otel/test_langgraph.py",
    "otel/test_pydantic_ai.py",
    "otel/test_replay.py",
    "otel/test_steps.py",
)
OLD_PYTHON = sys.version_info < (3, 11)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--every-python",
        action="store_true",
        help="only the tests EVERY_PYTHON names (scripts/pythons runs them on the other Pythons)",
    )
    parser.addoption(
        "--portable",
        action="store_true",
        help="only the tests PORTABLE names (the CI runs them on macOS and Windows)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "new_schema: the test's PostgreSQL ledger is made from nothing, never an emptied one"
        " of an earlier test (tests/schemas.py): for tests of making and migrating a ledger",
    )


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    if not collection_path.is_relative_to(TESTS) or collection_path == TESTS:
        return None
    path = collection_path.relative_to(TESTS)
    if OLD_PYTHON and any(p.as_posix() in PY311_ONLY for p in (path, *path.parents)):
        return True
    for option, entries in (("every_python", EVERY_PYTHON), ("portable", PORTABLE)):
        if config.getoption(option):  # no other file is even imported
            chosen = (entry == path.as_posix() or entry.startswith(f"{path}/") for entry in entries)
            return not any(chosen) or None
    return None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The files holding slow tests first, each file's tests still together and in order.

    Under xdist the run ends when its last tests do: a minute-long test handed out near the end
    keeps one worker busy while the other has nothing left. Started first, the long tests share
    the workers with the thousands of short ones that follow. Whole files move, so a fixture a
    file builds once (a wheel, the docs site) is still built once on each worker."""
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow_files)


def pytest_report_header() -> list[str]:
    if not OLD_PYTHON:
        return []
    left_out = ", ".join(f"tests/{path}" for path in PY311_ONLY)
    return [f"left out on Python 3.10 ({NEEDS_PY311}): {left_out}"]


# What `bash scripts/pythons` runs on 3.10, 3.12 and 3.13 (`pytest --every-python`; the whole
# suite runs on 3.11, and on every version with `scripts/test --all-pythons`): the core's
# behaviour on both databases, canonical arguments and results, a crash matrix with real child
# processes, and each integration's own agent.
EVERY_PYTHON = (
    "core/test_effects.py",
    "core/test_canonical.py",
    "core/test_codec.py",
    "crash/test_crash_matrix.py",
    "mcp/test_client.py",
    "openai_agents/test_once_only.py",
    "langgraph/test_middleware.py",
    "pydantic_ai/test_once_only.py",
)


# What the CI runs on macOS and Windows (`pytest --portable -k "not postgres"`), and what
# tests/core/test_platforms.py runs in an interpreter stripped of POSIX's names: the core's
# behaviour on SQLite (effects, approvals, doubt, a claim whose answer was lost), canonical
# arguments and results, and the platform's own facts.
PORTABLE = (
    "core/test_effects.py",
    "core/test_approvals.py",
    "core/test_lost_claim.py",
    "core/test_canonical.py",
    "core/test_codec.py",
    "core/test_platforms.py",
)


def needs_py311(text: str) -> bool:
    """Whether code (a README block, an example) drives LangChain or Pydantic AI."""
    return any(name in text for name in ("langchain", "langgraph", "pydantic_ai"))


def _postgres_problem() -> str | None:
    url = os.environ.get(PG_ENV)
    if not url:
        return (
            f"{PG_ENV} is not set: name a PostgreSQL server these tests may restart (the serial "
            "tests do), not a shared one, e.g. postgresql+psycopg://postgres@127.0.0.1:5433/c4a_test"
        )
    try:
        import psycopg

        plain = url.replace("postgresql+psycopg://", "postgresql://", 1)
        with psycopg.connect(plain, connect_timeout=5) as conn:
            conn.execute("select 1")
    except Exception as exc:
        return f"PostgreSQL at {PG_ENV} is not reachable: {exc}"
    return None


_PG_PROBLEM: list[str | None] = []


def postgres_url() -> str:
    """The test server's URL, or skip (fail under CI=true) with the reason."""
    if not _PG_PROBLEM:
        _PG_PROBLEM.append(_postgres_problem())
    problem = _PG_PROBLEM[0]
    if problem:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true but PostgreSQL tests cannot run: {problem}", pytrace=False)
        pytest.skip(problem)
    return os.environ[PG_ENV]


class Target:
    """Where a test's ledger lives; child processes open the same one from url + schema.

    A PostgreSQL target of make_target names its schema when first asked: a test that names it
    (to a command, a child, its own SQL) before opening a ledger gets one that does not exist
    yet, so what it opens or migrates is made from nothing; a test whose first use is ``open``
    (as the ``ledger`` fixture's is) gets a ledger made earlier on this worker and emptied, the
    same as a new one to everything a test can see (tests/schemas.py). A test marked
    ``new_schema`` has even that made from nothing."""

    def __init__(
        self,
        backend: str,
        url: str,
        schema: str | None = None,
        *,
        pool: schemas.SchemaPool | None = None,
    ) -> None:
        self.backend, self.url = backend, url
        self._schema, self._pool = schema, pool
        self.opened: list[c4a.Ledger] = []

    @property
    def schema(self) -> str | None:
        if self._schema is None and self._pool is not None:
            self._schema = schemas.new_name()
        return self._schema

    def open(self, **settings: Any) -> c4a.Ledger:
        if self._schema is None and self._pool is not None and settings.get("auto_migrate", True):
            self._schema = self._pool.take()
        ledger = c4a.Ledger(self.url, schema=self.schema, **settings)
        self.opened.append(ledger)
        return ledger

    def env(self) -> dict[str, str]:
        env = dict(os.environ, C4A_TEST_URL=self.url, C4A_TEST_SCHEMA=self.schema or "")
        env.setdefault("CALL4AGENTS_SECRET", TEST_SECRET)
        return env

    def close(self) -> None:
        """Close the ledgers opened here, and hand the schema back (kept emptied, or dropped)."""
        for ledger in self.opened:
            ledger.close()
        if self._pool is not None and self._schema is not None:
            self._pool.give_back(self._schema)

    def __repr__(self) -> str:
        return f"Target({self.backend!r}, {self.url!r}, schema={self._schema!r})"


def make_target(backend: str, tmp_path: Path, *, new_schema: bool = False) -> Iterator[Target]:
    """``new_schema``: made from nothing even when the test's first use is ``open``."""
    if backend == "sqlite":
        target = Target("sqlite", f"sqlite:///{tmp_path / 'ledger.db'}")
    else:
        pool = schemas.pool_for(postgres_url())
        target = Target("postgres", pool.url, pool=pool)
        if new_schema:
            assert target.schema  # named now: nothing is made for it before it is opened
    try:
        yield target
    finally:
        target.close()


TEST_SECRET = "test-secret-" + "x" * 40


@pytest.fixture(autouse=True)
def _ledger_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    # Every worker of a PostgreSQL ledger shares one secret; tests play all the workers.
    monkeypatch.setenv("CALL4AGENTS_SECRET", TEST_SECRET)
    # No default ledger is left over from an earlier test on this worker (its database may be
    # gone): a test that wants one opens it.
    monkeypatch.setattr(
        importlib.import_module("call4agents.engine.default"), "_default_ledger", None
    )


@pytest.fixture(scope="session", autouse=True)
def _kept_schemas() -> Iterator[None]:
    yield
    schemas.close_all()  # the worker's emptied schemas, kept for its next test until now


def _new_schema(request: pytest.FixtureRequest) -> bool:
    return request.node.get_closest_marker("new_schema") is not None


@pytest.fixture(params=["sqlite", "postgres"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Target]:
    """A fresh, empty ledger location on each backend."""
    yield from make_target(request.param, tmp_path, new_schema=_new_schema(request))


@pytest.fixture
def sqlite_target(tmp_path: Path) -> Iterator[Target]:
    yield from make_target("sqlite", tmp_path)


@pytest.fixture
def pg_target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Target]:
    yield from make_target("postgres", tmp_path, new_schema=_new_schema(request))


@pytest.fixture
def ledger(target: Target) -> c4a.Ledger:
    """A fresh ledger on each backend, installed as the default for @c4a.effect."""
    return c4a.init(target.open(lease=5.0, wait=5.0))


def run_child(
    script: Path | str, *args: str, env: dict[str, str], timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """Run a Python file as a new process of this environment (see tests/forked.py)."""
    return forked.run_script(script, list(args), env=env, timeout=timeout)


EXAMPLES = Path(__file__).parents[1] / "examples"


def run_example(path: Path, cwd: Path, timeout: float = 120) -> str:
    """Run one example file as a user would, in ``cwd``; its stdout, or fail with its stderr."""
    done = subprocess.run(
        [sys.executable, str(path)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout
