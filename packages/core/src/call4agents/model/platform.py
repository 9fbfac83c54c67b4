"""What the operating system offers the ledger, stated once: POSIX (Linux, macOS) or Windows.

Every call that exists on one platform only goes through here, so the rest of the code reads the
same everywhere and ``import call4agents`` works on a Python that lacks them:

* fork hooks: Windows has no ``fork``, so there is no child holding copies to reset;
* who owns a file and who may write it: POSIX user ids and mode bits. NTFS answers with access
  lists, which ``os.stat`` does not show (its mode bits are made up from the read-only flag), so
  on Windows the ledger's owner and mode checks are not made (see ``FILE_OWNERS``);
* killing a process at once: SIGKILL on POSIX, ``TerminateProcess`` on Windows (what
  ``Popen.kill()`` calls there);
* macOS: ``fsync`` leaves a commit in the drive's cache; only ``F_FULLFSYNC`` writes it through.

Each is read when asked, not when this module loads, so a test can play another platform.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable
from typing import NoReturn

# The exit code a Windows process gets from ``kill_this_process`` (TerminateProcess's argument).
WINDOWS_KILLED = 9


def at_fork(
    *,
    before: Callable[[], object] | None = None,
    after_in_parent: Callable[[], object] | None = None,
    after_in_child: Callable[[], object] | None = None,
) -> None:
    """``os.register_at_fork`` where the platform forks; nothing where it cannot (Windows)."""
    register = getattr(os, "register_at_fork", None)
    if register is None:
        return
    hooks = {"before": before, "after_in_parent": after_in_parent, "after_in_child": after_in_child}
    register(**{name: hook for name, hook in hooks.items() if hook is not None})


def user_id() -> int | None:
    """This process's effective user id, or None where files have no POSIX owner (Windows)."""
    geteuid: Callable[[], int] | None = getattr(os, "geteuid", None)
    return geteuid() if geteuid is not None else None


def file_owners() -> bool:
    """Whether a file's owner and mode bits can be checked here (POSIX) or not (Windows)."""
    return user_id() is not None


# ``os.open`` flags: refuse to follow a link at the last step (POSIX); write bytes untranslated
# (Windows). Each is 0 where the platform has no such flag.
NOFOLLOW: int = getattr(os, "O_NOFOLLOW", 0)
BINARY: int = getattr(os, "O_BINARY", 0)


def full_fsync() -> bool:
    """Whether a durable commit must ask for F_FULLFSYNC (macOS: fsync stops at the drive cache)."""
    return sys.platform == "darwin"


def killed_exit_code() -> int:
    """The exit code of a process ended by :func:`kill_this_process` (as multiprocessing and
    subprocess report it: minus the signal's number on POSIX)."""
    sigkill: int | None = getattr(signal, "SIGKILL", None)
    return -sigkill if sigkill is not None else WINDOWS_KILLED


def kill_this_process() -> NoReturn:
    """End this process at once, as a crash or the OOM killer would: no cleanup, nothing flushed.

    SIGKILL on POSIX; on Windows ``os.kill`` with any other number is ``TerminateProcess``.
    """
    sigkill: int | None = getattr(signal, "SIGKILL", None)
    os.kill(os.getpid(), sigkill if sigkill is not None else WINDOWS_KILLED)
    os._exit(WINDOWS_KILLED)  # not reached: the process is gone (and must run no cleanup)
