"""Every telemetry name Call4Agents emits, in one place.

The GenAI semantic conventions are still marked "development" in OpenTelemetry, so a rename there
should touch this module only. Our own attributes live under ``call4agents.``. Integrations
import these names too (the Agents SDK trace span carries the same attributes).
"""

from __future__ import annotations

from typing import Final

INSTRUMENTATION_SCOPE: Final = "call4agents"
VERSION: Final = (
    "0.1.0.dev0"  # the scope's version, and the package's (``call4agents.__version__``)
)

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
# On the span around a run, as its outermost ``c4a.run`` block leaves (see ``run_notes``).
RUN_TRIGGER: Final = "call4agents.run.trigger"  # user | schedule | webhook | retry
RUN_TOOL_CALLS: Final = "call4agents.run.tool_calls"  # tool calls made in this entry
RUN_WITHOUT_READ: Final = "call4agents.run.without_read"  # completed, no read tool ever called
BUDGET_COST_SPENT: Final = "call4agents.budget.cost_spent"
BUDGET_WALL_CLOCK_MS: Final = "call4agents.budget.wall_clock_ms"  # summed over the run's entries
ESCALATION_REASON: Final = "call4agents.escalation.reason"

# -- steps: one turn of the agent loop (a model request and what it asked for) -----------------
STEP_SPAN: Final = "call4agents.step"
STEP_INDEX: Final = "call4agents.step.index"
STEP_STOP_REASON: Final = "call4agents.step.stop_reason"  # tool_call | end | token_limit | refusal
GEN_AI_RESPONSE_MODEL: Final = "gen_ai.response.model"
GEN_AI_RESPONSE_FINISH_REASONS: Final = "gen_ai.response.finish_reasons"
GEN_AI_INPUT_TOKENS: Final = "gen_ai.usage.input_tokens"
GEN_AI_OUTPUT_TOKENS: Final = "gen_ai.usage.output_tokens"
GEN_AI_CACHE_READ_TOKENS: Final = "gen_ai.usage.cache_read.input_tokens"
GEN_AI_CACHE_WRITE_TOKENS: Final = "gen_ai.usage.cache_creation.input_tokens"

# -- metrics --------------------------------------------------------------------------------------
METRIC_ACTIONS: Final = "call4agents.actions"
METRIC_RUNS_ENDED: Final = "call4agents.runs.ended"  # by call4agents.run.terminal_reason
METRIC_IRREVERSIBLE: Final = "call4agents.irreversible.executions"
METRIC_DURATION: Final = "call4agents.action.duration"
METRIC_IN_DOUBT_OPEN: Final = "call4agents.in_doubt.open"
METRIC_APPROVALS_WAITING: Final = "call4agents.approvals.waiting"
METRIC_APPROVALS_OLDEST_AGE: Final = "call4agents.approvals.oldest_age"
# An approval-required tool that ran with no spent "yes" in the ledger: must stay at zero.
METRIC_UNAPPROVED: Final = "call4agents.unapproved.executions"
METRIC_ESCALATIONS_OPEN: Final = "call4agents.escalations.open"
METRIC_ESCALATIONS_OLDEST_AGE: Final = "call4agents.escalations.oldest_age"
METRIC_RUNS_WITHOUT_READ: Final = "call4agents.runs.completed_without_read"
METRIC_RUN_COST: Final = "call4agents.run.cost"
METRIC_RUN_TOOL_CALLS: Final = "call4agents.run.tool_calls"
METRIC_RUN_DURATION: Final = "call4agents.run.duration"
