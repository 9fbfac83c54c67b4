"""Call4Agents: every action with a side effect happens at most once per logical action.

import call4agents as c4a

c4a.init()                        # sqlite:///.c4a/ledger.db, or $CALL4AGENTS_URL

@c4a.effect
def send_email(to: str, body: str) -> str: ...

with c4a.run("ticket-1234"):      # the id the agent resumes with
    send_email("bob@example.com", "Your refund is on its way")
"""

import importlib
from typing import TYPE_CHECKING, Any

from .controls import telemetry as _telemetry  # noqa: F401  (installs OpenTelemetry's default)
from .engine.context import EffectContext, bind, current, tool_call
from .model import _semconv
from .model.errors import (
    ApprovalDenied,
    ApprovalRequired,
    Call4AgentsError,
    ConfigurationError,
    EffectInDoubt,
    EffectInProgress,
    LedgerError,
    OutcomeUnknown,
    ResultNotStored,
    ResultPruned,
    UnstableArguments,
)

if TYPE_CHECKING:
    from .controls.replay import ReplayedFailure, ReplayMismatch, replay
    from .controls.undo import UndoItem, UndoReport
    from .engine.action import EffectOptions
    from .engine.approvals import ApprovalRequest
    from .engine.budgets import (
        Budget,
        BudgetUsage,
        budget_usage,
        count_model_request,
        record_model_usage,
    )
    from .engine.effect import Effect, approve, deny, effect
    from .engine.endings import Escalated, Handoff, RunStatus, escalate
    from .engine.ledger_core import GcReport
    from .engine.lookup import find_marked, key_marker
    from .engine.records import EffectRecord, RunSummary
    from .engine.run_block import run
    from .engine.verdicts import DidNotHappen, Happened
    from .facade.ledger import Ledger, default_ledger, init
    from .model.errors import BudgetExceeded
    from .storage.approval_rows import WaitingFilter
    from .storage.audit_rows import AuditEntry
    from .storage.reads import DoubtFilter

# Everything that needs SQLAlchemy is imported on first use (PEP 562), so a process that only
# imports the package, or a command that needs little of it, does not pay for all of it.
_LAZY = {
    "run": "engine.run_block",
    "ApprovalRequest": "engine.approvals",
    "AuditEntry": "storage.audit_rows",
    "Budget": "engine.budgets",
    "BudgetExceeded": "model.errors",
    "BudgetUsage": "engine.budgets",
    "DidNotHappen": "engine.verdicts",
    "DoubtFilter": "storage.reads",
    "Effect": "engine.effect",
    "EffectOptions": "engine.action",
    "EffectRecord": "engine.records",
    "Escalated": "engine.endings",
    "GcReport": "engine.ledger_core",
    "Handoff": "engine.endings",
    "Happened": "engine.verdicts",
    "Ledger": "facade.ledger",
    "ReplayMismatch": "controls.replay",
    "ReplayedFailure": "controls.replay",
    "RunStatus": "engine.endings",
    "RunSummary": "engine.records",
    "UndoItem": "controls.undo",
    "UndoReport": "controls.undo",
    "WaitingFilter": "storage.approval_rows",
    "approve": "engine.effect",
    "budget_usage": "engine.budgets",
    "count_model_request": "engine.budgets",
    "default_ledger": "facade.ledger",
    "deny": "engine.effect",
    "effect": "engine.effect",
    "escalate": "engine.endings",
    "find_marked": "engine.lookup",
    "init": "facade.ledger",
    "key_marker": "engine.lookup",
    "record_model_usage": "engine.budgets",
    "replay": "controls.replay",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'call4agents' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value  # once found, an ordinary attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


__version__ = _semconv.VERSION
# Lets integrations tell this project's core apart from the unrelated `call4agents` on PyPI.
__c4a_core__ = True

__all__ = [
    "ApprovalDenied",
    "ApprovalRequest",
    "ApprovalRequired",
    "AuditEntry",
    "Budget",
    "BudgetExceeded",
    "BudgetUsage",
    "Call4AgentsError",
    "ConfigurationError",
    "DidNotHappen",
    "DoubtFilter",
    "Effect",
    "EffectContext",
    "EffectInDoubt",
    "EffectInProgress",
    "EffectOptions",
    "EffectRecord",
    "Escalated",
    "GcReport",
    "Handoff",
    "Happened",
    "Ledger",
    "LedgerError",
    "OutcomeUnknown",
    "ReplayMismatch",
    "ReplayedFailure",
    "ResultNotStored",
    "ResultPruned",
    "RunStatus",
    "RunSummary",
    "UndoItem",
    "UndoReport",
    "UnstableArguments",
    "WaitingFilter",
    "approve",
    "bind",
    "budget_usage",
    "count_model_request",
    "current",
    "default_ledger",
    "deny",
    "effect",
    "escalate",
    "find_marked",
    "init",
    "key_marker",
    "record_model_usage",
    "replay",
    "run",
    "tool_call",
]
