"""Child processes that start in milliseconds: forked from a server that imported the frameworks.

A crash test runs an agent in a child process and SIGKILLs it; a fresh interpreter spends seconds
importing LangChain, the Agents SDK or Pydantic AI before the agent starts, and the suite runs
hundreds of children. So children come from ``call4agents._children`` (the quickstart's own): forked
from multiprocessing's fork server, a clean process (it runs no test and opens no ledger) that
imports those packages once. Each child is still a new process, with its own pid, memory and
connections: it knows nothing its parent did not write down, and SIGKILL ends it as it would any
process. Inside it the script runs as ``python script args`` would: as ``__main__``, with its
folder first on ``sys.path`` and the given environment alone.
"""

from __future__ import annotations

import runpy
import subprocess
import sys
from pathlib import Path

from call4agents.facade import _children, quickstart

# What the children import: the quickstart's agents, and what the tests' own children add. Each
# is imported once per test worker, by the fork server.
_children.preload(
    [
        *quickstart.child_imports(),
        "call4agents",
        "sqlalchemy.dialects.postgresql.psycopg",
        "langgraph.prebuilt",
        "langgraph.checkpoint.postgres",
        "opentelemetry.sdk.trace",
        "uvicorn",  # the MCP tests' HTTP servers (tests/mcp/http_server.py)
    ]
)


def run_script(
    script: Path | str, args: list[str], *, env: dict[str, str], timeout: float
) -> subprocess.CompletedProcess[str]:
    """``script args`` in a forked child, as ``subprocess.run`` with its output captured."""
    argv = [str(script), *args]
    code, out, err = _children.run(_script, argv, env=env, timeout=timeout)
    return subprocess.CompletedProcess(argv, code, out, err)


def start(script: Path | str, args: list[str], *, env: dict[str, str]) -> _children.Child:
    """``script args`` in a forked child left running (a server): the caller reads its output
    and kills and closes it."""
    return _children.Child(_script, [str(script), *args], env=env)


def run_together(
    script: Path | str, runs: list[tuple[list[str], dict[str, str]]], *, timeout: float = 180
) -> list[subprocess.CompletedProcess[str]]:
    """Each ``(args, env)`` as ``script args`` in a forked child, all started at once (workers that
    race, as processes started together do); waits for every one, as ``subprocess.run`` would."""
    children = [_children.Child(_script, [str(script), *args], env=env) for args, env in runs]
    try:
        codes = [child.wait(timeout) for child in children]
        return [
            subprocess.CompletedProcess([str(script), *args], code, child.stdout, child.stderr)
            for (args, _), code, child in zip(runs, codes, children, strict=True)
        ]
    finally:
        for child in children:
            child.close()


def _script(argv: list[str]) -> None:
    sys.argv = list(argv)
    sys.path.insert(0, str(Path(argv[0]).resolve().parent))
    runpy.run_path(argv[0], run_name="__main__")
