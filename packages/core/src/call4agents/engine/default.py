"""The ledger effects use when none is given: ``c4a.init`` puts it here."""

from __future__ import annotations

from typing import TYPE_CHECKING

from call4agents.model.errors import ConfigurationError

if TYPE_CHECKING:
    from .ledger_core import LedgerCore

_default_ledger: LedgerCore | None = None


def use_default(ledger: LedgerCore) -> None:
    """Make ``ledger`` the one effects use when none is given (``c4a.init`` calls it)."""
    global _default_ledger
    _default_ledger = ledger


def default_ledger() -> LedgerCore:
    if _default_ledger is None:
        raise ConfigurationError(
            "no ledger is open: call c4a.init() once at start-up (or pass ledger= to the run or "
            "the effect)"
        )
    return _default_ledger


def default_or_none() -> LedgerCore | None:
    """The default ledger, or None where ``c4a.init`` was not called."""
    return _default_ledger
