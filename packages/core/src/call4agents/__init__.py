"""Call4Agents: every action with a side effect happens at most once per logical action.

import call4agents as c4a

c4a.init()                        # sqlite:///.c4a/ledger.db, or $CALL4AGENTS_URL

@c4a.effect
def send_email(to: str, body: str) -> str: ...

with c4a.run("ticket-1234"):      # the id the agent resumes with
    send_email("bob@example.com", "Your refund is on its way")
"""

from .approvals import ApprovalRequest
from .context import EffectContext, bind, current, run, tool_call
from .effect import (
    DidNotHappen,
    Effect,
    EffectOptions,
    Happened,
    approve,
    default_ledger,
    deny,
    effect,
    init,
)
from .errors import (
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
from .ledger import EffectRecord, GcReport, Ledger, RunSummary
from .lookup import find_marked, key_marker
from .replay import ReplayedFailure, ReplayMismatch, replay
from .runs import (
    Budget,
    BudgetExceeded,
    BudgetUsage,
    Escalated,
    Handoff,
    RunStatus,
    budget_usage,
    count_model_request,
    escalate,
    record_model_usage,
)
from .undo import UndoItem, UndoReport

__version__ = "0.1.0.dev0"
# Lets integrations tell this project's core apart from the unrelated `call4agents` on PyPI.
__c4a_core__ = True

__all__ = [
    "ApprovalDenied",
    "ApprovalRequest",
    "ApprovalRequired",
    "Budget",
    "BudgetExceeded",
    "BudgetUsage",
    "Call4AgentsError",
    "ConfigurationError",
    "DidNotHappen",
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
