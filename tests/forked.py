"""Child processes that start in milliseconds: forked from a server that imported the frameworks.

A crash test runs an agent in a child process and SIGKILLs it; a fresh interpreter spends seconds
importing LangChain, the Agents SDK or Pydantic AI before the agent starts, and the suite runs
hundreds of children. So children are forked from multiprocessing's fork server, a clean process
(it runs no test and opens no ledger) that imports those packages once. Each child is still a
new process, with its own pid, memory and connections: it knows nothing its parent did not write
down, and SIGKILL ends it as it would any process. Inside it the script runs as ``python script
args`` would: as ``__main__``, with its folder first on ``sys.path``, the given environment
alone, its output to files, and exit handlers run on a normal exit.
"""

from __future__ import annotations

import atexit
import multiprocessing
import os
import runpy
import subprocess
import sys
import tempfile
from pathlib import Path

# What the children import; each is imported once per test worker, by the fork server.
PRELOAD = [
    "call4agents",
    "call4agents.cli",
    "sqlalchemy.dialects.postgresql.psycopg",
    "langchain.agents",
    "langgraph.prebuilt",
    "langgraph.checkpoint.sqlite",
    "langgraph.checkpoint.postgres",
    "call4agents_langgraph",
    "pydantic_ai",
    "call4agents_pydantic_ai",
    "agents",
    "call4agents_openai_agents",
    "mcp",
    "call4agents_mcp",
    "opentelemetry.sdk.trace",
]

_context = multiprocessing.get_context("forkserver")
_context.set_forkserver_preload(PRELOAD)  # a package that is not installed is skipped


def run_script(
    script: Path | str, args: list[str], *, env: dict[str, str], timeout: float
) -> subprocess.CompletedProcess[str]:
    """``script args`` in a forked child, as ``subprocess.run`` with its output captured."""
    argv = [str(script), *args]
    with tempfile.TemporaryDirectory(prefix="c4a-child-") as tmp:
        out, err = Path(tmp, "stdout"), Path(tmp, "stderr")
        child = _context.Process(target=_main, args=(argv, env, str(out), str(err)))
        child.start()
        child.join(timeout)
        if child.exitcode is None:
            child.kill()
            child.join()
            raise subprocess.TimeoutExpired(argv, timeout, _read(out), _read(err))
        return subprocess.CompletedProcess(argv, child.exitcode, _read(out), _read(err))


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""


def _main(argv: list[str], env: dict[str, str], out: str, err: str) -> None:
    """In the child: become ``python argv...`` with ``env``, then run the script as __main__."""
    for fd, path in ((1, out), (2, err)):
        target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(target, fd)
        os.close(target)
    os.environ.clear()
    os.environ.update(env)
    sys.argv = list(argv)
    sys.path.insert(0, str(Path(argv[0]).resolve().parent))
    try:
        runpy.run_path(argv[0], run_name="__main__")
    finally:
        atexit._run_exitfuncs()  # the interpreter would; multiprocessing children skip them
