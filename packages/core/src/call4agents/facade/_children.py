"""The quickstart's child agents: real processes, started without seconds of imports each.

A quickstart row runs an agent in a child process, kills it at once (``kill_this_process``:
SIGKILL, or TerminateProcess on Windows) and resumes it in a fresh one. A fresh interpreter
spends seconds importing an agent framework before the agent starts. So, where the platform has
it, children are forked from multiprocessing's fork server: a clean process (it runs no agent
and opens no ledger) that imports the frameworks once. Each child is still a new process with
its own memory and connections, knowing only what was written down. Elsewhere (Windows)
children are spawned, slower but alike.
"""

from __future__ import annotations

import atexit
import contextlib
import faulthandler
import importlib
import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from call4agents.model.platform import kill_this_process as kill_this_process
from call4agents.model.platform import killed_exit_code

# A child's time limit is the caller's, in seconds on an idle machine, scaled by the load per core
# (a busy machine runs every child slower), or this variable's seconds when it is set.
TIMEOUT_ENV = "CALL4AGENTS_CHILD_TIMEOUT"

_METHOD = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
_context: Any = multiprocessing.get_context(_METHOD)
# The exit code of a child that ended itself with ``kill_this_process`` (-9 on POSIX).
KILLED = killed_exit_code()


def preload(modules: Iterable[str]) -> None:
    """Modules the fork server imports once, before its first child (missing ones are skipped)."""
    if _METHOD == "forkserver":
        _context.set_forkserver_preload(list(modules))


class Child:
    """One child process running ``target(*args)``; its output goes to files read on demand."""

    def __init__(self, target: Callable[..., Any], *args: Any, env: dict[str, str] | None) -> None:
        self._what = _describe(target, args)
        self._tmp = tempfile.TemporaryDirectory(prefix="c4a-child-")
        self._out, self._err = Path(self._tmp.name, "stdout"), Path(self._tmp.name, "stderr")
        paths = (str(self._out), str(self._err))
        with _lock:  # one start at a time: the main module is hidden while it runs
            work = (_importable(target), args, env, *paths)
            self._process = _context.Process(target=_main, args=work)
            with _main_module_hidden():
                self._process.start()

    def wait(self, timeout: float) -> int:
        """Wait for the exit code (minus the signal's number if a signal ended it); a child still
        running after ``timeout`` (see ``time_limit``) is stopped, saying where it was."""
        limit = time_limit(timeout)
        multiprocessing.connection.wait([self._process.sentinel], limit)
        code = self.exitcode
        if code is None:
            raise TimeoutError(self._stopped(limit))
        return code

    def _stopped(self, limit: float) -> str:
        """Stop a child that ran out of time; what it was doing, and how to give it more."""
        pid = self._process.pid
        if pid is not None:  # faulthandler (see _main) prints every thread's stack on SIGABRT
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGABRT)
            multiprocessing.connection.wait([self._process.sentinel], 10)
        self.kill()
        where = "\n".join(self.stderr.strip().splitlines()[-12:]) or "(it printed nothing)"
        return (
            f"the child running {self._what} was still running after {limit:.0f}s and was "
            f"stopped. On a busy machine, give children more time: {TIMEOUT_ENV}=600 (seconds). "
            f"Where it was, last lines of its stderr:\n{where}"
        )

    @property
    def exitcode(self) -> int | None:
        """The exit code once the child has ended, else None.

        Read under ``_lock``: every ``Process.start()`` polls all the children still running, and
        a fork-server child's exit code is a few bytes read once from a pipe; two threads reading
        it at once leave one of them with EOF, which multiprocessing reports as exit code 255.
        """
        with _lock:
            code: int | None = self._process.exitcode
        return code

    def first_line(self, timeout: float) -> str:
        """The first line the child printed, waiting for it ('' if it exited without one)."""
        deadline = time.monotonic() + time_limit(timeout)
        while time.monotonic() < deadline:
            text = self.stdout
            if "\n" in text or self.exitcode is not None:
                return text.partition("\n")[0]
            time.sleep(0.02)
        return ""

    def kill(self) -> None:
        with _lock:
            # Polled first: the fork server reaps an ended child at once, and its pid may be reused.
            if self._process.exitcode is None:
                with contextlib.suppress(OSError, ValueError):
                    self._process.kill()
        multiprocessing.connection.wait([self._process.sentinel])

    @property
    def stdout(self) -> str:
        return _read(self._out)

    @property
    def stderr(self) -> str:
        return _read(self._err)

    def close(self) -> None:
        if self.exitcode is None:
            self.kill()
        self._tmp.cleanup()

    def __enter__(self) -> Child:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def run(
    target: Callable[..., Any], *args: Any, env: dict[str, str] | None = None, timeout: float = 120
) -> tuple[int, str, str]:
    """Run ``target(*args)`` in a child to its end: (exit code, stdout, stderr)."""
    with Child(target, *args, env=env) as child:
        code = child.wait(timeout)
        return code, child.stdout, child.stderr


def time_limit(seconds: float) -> float:
    """``seconds`` (the time a child needs on an idle machine, with room to spare) scaled by the
    load per core, or ``$CALL4AGENTS_CHILD_TIMEOUT`` seconds when it is set."""
    given = os.environ.get(TIMEOUT_ENV, "").strip()
    if given:
        try:
            return float(given)
        except ValueError:
            raise ValueError(f"{TIMEOUT_ENV}={given!r} is not a number of seconds") from None
    try:
        load = os.getloadavg()[0] / (os.cpu_count() or 1)
    except (AttributeError, OSError):  # no load average on this platform (Windows)
        load = 1.0
    return seconds * max(1.0, load)


def _describe(target: Callable[..., Any], args: tuple[Any, ...]) -> str:
    shown = ", ".join(repr(a) if isinstance(a, str | int) else type(a).__name__ for a in args)
    return f"{target.__module__}.{target.__qualname__}({shown})"


# Guards every use of multiprocessing's process objects: starts, and reads of exit codes.
_lock = threading.Lock()


@contextlib.contextmanager
def _main_module_hidden() -> Iterator[None]:
    """Start a child without it running the caller's main module first.

    multiprocessing makes a fork-server or spawned child import the main script or ``-m`` module
    again, so that functions defined there can be found; one that starts children at its top
    level, with no ``if __name__ == "__main__"`` guard, would then start them again in each
    child. Our targets are found by their module's own name (see ``_importable``), so the main
    module's name and path are hidden while a child starts (under ``_lock``).
    """
    main = sys.modules["__main__"]
    saved: dict[str, Any] = {
        k: main.__dict__[k] for k in ("__file__", "__spec__") if k in main.__dict__
    }
    main.__dict__.pop("__file__", None)
    main.__spec__ = None  # read without a default by multiprocessing
    try:
        yield
    finally:
        main.__dict__.update(saved)


def _importable(target: Callable[..., Any]) -> Callable[..., Any]:
    """``target`` as the child can import it: a module run with ``python -m`` is ``__main__``
    here, and its functions are found in the child under the module's own name."""
    spec = getattr(sys.modules["__main__"], "__spec__", None)
    if target.__module__ != "__main__" or spec is None:
        return target
    found: Callable[..., Any] = getattr(importlib.import_module(spec.name), target.__qualname__)
    return found


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""


def _main(
    target: Callable[..., Any], args: tuple[Any, ...], env: dict[str, str] | None, out: str,
    err: str,
) -> None:  # fmt: skip
    """In the child: output to the files, the given environment, then ``exit(target(*args))``."""
    for fd, path in ((1, out), (2, err)):
        opened = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(opened, fd)
        os.close(opened)
    faulthandler.enable()  # a crash in C code leaves a traceback in the stderr file, not silence
    if env is not None:
        os.environ.clear()
        os.environ.update(env)
    try:
        code = target(*args)
    finally:
        atexit._run_exitfuncs()  # an interpreter runs them at exit; multiprocessing does not
    raise SystemExit(code)
