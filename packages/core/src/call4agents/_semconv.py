"""Every telemetry name Call4Agents emits, in one place.

The GenAI semantic conventions are still marked "development" in OpenTelemetry, so a rename there
should touch this module only. Our own attributes live under ``call4agents.``. Integrations
import these names too (the Agents SDK trace span carries the same attributes).
"""

from __future__ import annotations

from typing import Final

INSTRUMENTATION_SCOPE: Final = "call4agents"

# -- GenAI semantic conventions (execute_tool spans) ----------------------------------------------
OPERATION_EXECUTE_TOOL: Final = "execute_tool"
GEN_AI_OPERATION_NAME: Final = "gen_ai.operation.name"
GEN_AI_TOOL_NAME: Final = "gen_ai.tool.name"
GEN_AI_TOOL_CALL_ID: Final = "gen_ai.tool.call.id"
GEN_AI_TOOL_TYPE: Final = "gen_ai.tool.type"
GEN_AI_TOOL_CALL_ARGUMENTS: Final = "gen_ai.tool.call.arguments"  # opt-in only
GEN_AI_TOOL_CALL_RESULT: Final = "gen_ai.tool.call.result"  # opt-in only
ERROR_TYPE: Final = "error.type"


def span_name(tool: str) -> str:
    return f"{OPERATION_EXECUTE_TOOL} {tool}"


# -- Call4Agents' own attributes ----------------------------------------------------------------
RUN_ID: Final = "call4agents.run.id"
SIDE_EFFECT: Final = "call4agents.side_effect"  # none | read | write | irreversible
ACTION_KEY: Final = "call4agents.action.key"
IDEMPOTENCY_KEY: Final = "call4agents.idempotency_key"
ATTEMPT: Final = "call4agents.attempt"
OUTCOME: Final = "call4agents.outcome"
EXTERNAL_ID: Final = "call4agents.external_id"
APPROVAL_TICKET: Final = "call4agents.approval.ticket"
APPROVAL_DECIDED_BY: Final = "call4agents.approval.decided_by"
LEDGER: Final = "call4agents.ledger"  # on the gauges: the ledger URL, password masked
TOOL_DURATION: Final = "call4agents.tool.duration"  # seconds inside the tool, ledger I/O excluded
# How a run ended when a run control ended it: escalated, step_limit, budget, deadline, undone...
RUN_TERMINAL_REASON: Final = "call4agents.run.terminal_reason"
EVENT_RUN_ENDED: Final = "call4agents.run.ended"

# -- metrics --------------------------------------------------------------------------------------
METRIC_ACTIONS: Final = "call4agents.actions"
METRIC_RUNS_ENDED: Final = "call4agents.runs.ended"  # by call4agents.run.terminal_reason
METRIC_IRREVERSIBLE: Final = "call4agents.irreversible.executions"
METRIC_DURATION: Final = "call4agents.action.duration"
METRIC_IN_DOUBT_OPEN: Final = "call4agents.in_doubt.open"
METRIC_APPROVALS_WAITING: Final = "call4agents.approvals.waiting"
METRIC_APPROVALS_OLDEST_AGE: Final = "call4agents.approvals.oldest_age"
