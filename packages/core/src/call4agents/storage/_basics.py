"""What storage states without SQLAlchemy, for the lean route (``_lean``) and the store alike:
the schema version this code writes, and a database fault as one line.
"""

from __future__ import annotations

from typing import Any, TypeVar

from call4agents.model.errors import LedgerError

# The schema version this code writes and reads: the number of migrations (``migrations``
# checks the two agree when it is imported).
CURRENT = 15


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
    return LedgerError(
        f"cannot open the ledger at {url}: {short_error(exc)}. Check that the database is "
        "reachable and that you may write to it (`call4agents doctor`)."
    )


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
