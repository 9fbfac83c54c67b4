"""The files beside an SQLite ledger: made owner-only, and checked before they are trusted.

Two rules, each closing a real hole:

* Never open a descriptor of a database file that SQLite may hold open in this process. POSIX
  drops every advisory lock a process holds on a file when *any* of its descriptors of that file
  is closed (sqlite.org, "How To Corrupt An SQLite Database File", 2.2); another process can then
  take the exclusive lock, checkpoint and delete the WAL under our live connections. A new file
  is therefore written under a temporary name, closed, and only then linked into place.
* Trust a file only if it is a plain file of this user that nobody else may write, as ssh does
  with its keys: a ``ledger.db`` or ``secret`` planted in a shared folder by another user would
  otherwise let them sign approvals of their own. Owner and mode are POSIX notions: on Windows
  (NTFS access lists, which ``os.stat`` does not show) only the link and plain-file checks are
  made, and the folder's own access list (a user profile's is private) decides who may write.
"""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

from call4agents.model import platform
from call4agents.model.errors import LedgerError


def create_private(path: Path, content: bytes = b"") -> bool:
    """Make ``path`` owner-only with ``content``, unless it exists; True if this call made it.

    ``os.link`` is atomic and fails if the name exists, so of several threads or processes making
    the file at once exactly one wins and the others use its file. No descriptor of ours is open on
    the file once it has its name.
    """
    if os.path.lexists(path):
        return False
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    # A name of its own per caller: threads of one process may be making it at once.
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        flags = os.O_CREAT | os.O_EXCL | os.O_WRONLY | platform.NOFOLLOW | platform.BINARY
        fd = os.open(tmp, flags, 0o600)
        try:
            if content:
                os.write(fd, content)
                os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
        finally:
            tmp.unlink()
    except OSError as exc:
        raise LedgerError(f"cannot create {path}: {exc.strerror}") from exc
    return True


def check_private(path: Path, *, what: str, may_be_read: bool = True) -> None:
    """Refuse ``path`` unless it is a plain file of this user that nobody else may write.

    With ``may_be_read=False`` others may not read it either (a secret). Only ``lstat`` is used:
    a check must not open the file (see the module's first rule).
    """
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise LedgerError(f"cannot check the {what} {path}: {exc.strerror}") from exc
    problem = _problem(info, may_be_read=may_be_read)
    if problem:
        raise LedgerError(
            f"refusing the {what} {path}: {problem}. Another user could have planted or changed "
            "it to sign approvals of their own. If it is yours and unchanged, "
            + _fix(path, info)
            + "; otherwise remove it (and restore the ledger from a backup)."
        )


def _problem(info: os.stat_result, *, may_be_read: bool) -> str | None:
    if stat.S_ISLNK(info.st_mode):
        return "it is a symbolic link"
    if not stat.S_ISREG(info.st_mode):
        return "it is not a regular file"
    me = platform.user_id()
    if me is None:
        return None  # Windows: no owner or mode bits to read (see the module's docstring)
    if info.st_uid != me:
        return f"it belongs to user id {info.st_uid}, not to this process's user ({me})"
    mode = stat.S_IMODE(info.st_mode)
    if mode & 0o022:
        return f"other users may write it (mode {mode:o})"
    if not may_be_read and mode & 0o044:
        return f"other users may read it (mode {mode:o})"
    return None


def _fix(path: Path, info: os.stat_result) -> str:
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISREG(info.st_mode):
        return f"replace the link with the file itself (mv {path} {path}.old and copy it back)"
    me = platform.user_id()
    if info.st_uid != me:
        return f"run as its owner, or take it over with chown {me} {path}"
    return f"chmod 600 {path}"


def check_ledger_files(db: Path) -> None:
    """Check an SQLite ledger file and the -wal and -shm files SQLite keeps beside it."""
    for path in (db, db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm")):
        check_private(path, what="ledger file")
