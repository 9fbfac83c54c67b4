"""What storage states without SQLAlchemy, for the lean route (``_lean``) and the store alike:
the schema version this code writes, and a database fault as one line.
"""

from __future__ import annotations

import re
from typing import Any, TypeVar
from urllib.parse import urlsplit

from call4agents.model.errors import LedgerError

# The schema version this code writes and reads: the number of migrations (``migrations``
# checks the two agree when it is imported).
CURRENT = 14

# PostgreSQL's FATAL for a database name the server does not have (libpq's wording).
_MISSING_DATABASE = re.compile(r'database "([^"]+)" does not exist')


def refuse_newer(version: int) -> None:
    if version > CURRENT:
        raise LedgerError(
            f"this ledger was written by a newer Call4Agents (schema version {version}; this "
            f"version knows up to {CURRENT}). Upgrade call4agents on this machine; the ledger was "
            "not changed."
        )


def short_error(exc: BaseException) -> str:
    """The first line of a database error, without SQLAlchemy's statement and parameters."""
    text = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def database_failed(exc: BaseException) -> LedgerError:
    """A fault of the database (a dropped connection, a lock waited for too long) as the one-line
    error every command shows."""
    return LedgerError(f"the ledger database failed: {short_error(exc)}")


def cannot_open(url: str, exc: BaseException) -> LedgerError:
    """A ledger that could not be opened (no server, no file, no rights), ``url`` with its
    password masked."""
    error = short_error(exc)
    missing = _MISSING_DATABASE.search(error)
    if missing is not None:  # the server is up: the one step left is to make the database
        return LedgerError(
            f"cannot open the ledger at {url}: the PostgreSQL database {missing.group(1)!r} does "
            f"not exist. Create it ({_createdb(url, missing.group(1))}), then try again"
        )
    return LedgerError(
        f"cannot open the ledger at {url}: {error}. Check that the database is "
        "reachable and that you may write to it (`call4agents doctor`)."
    )


def _createdb(url: str, name: str) -> str:
    """The ``createdb`` command that makes database ``name`` on the server ``url`` names."""
    parts = urlsplit(url)
    flags = [f"-h {parts.hostname}"] if parts.hostname else []
    flags += [f"-p {parts.port}"] if parts.port else []
    flags += [f"-U {parts.username}"] if parts.username else []
    return " ".join(["createdb", *flags, name])


_Lean = TypeVar("_Lean", bound="LeanConnection")


class LeanConnection:
    """A lean route's ledger (``_lean``, ``_lean_pg``): one driver connection, closed when the
    ``with`` block that opened it ends."""

    _conn: Any

    def close(self) -> None:
        self._conn.close()

    def __enter__(self: _Lean) -> _Lean:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
