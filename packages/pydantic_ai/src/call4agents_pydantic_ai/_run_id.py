"""The run id of a Pydantic AI tool call: the run's ``conversation_id``.

Pydantic AI resolves it at the start of every run from the ``conversation_id=`` argument, else
the newest ``conversation_id`` stamped on ``message_history``, else a fresh UUID7. The first two
survive a crash and a resume; the third survives only if the app saved the message history
before the process died, which is exactly the moment a crash test kills it.
"""

from __future__ import annotations

import uuid
from typing import Any

from pydantic_ai import RunContext

from call4agents import ConfigurationError
from call4agents.integration import warn_once


def run_id_of(ctx: RunContext[Any], tool: str) -> str:
    """The ledger run id for a recorded tool call, warning once if it cannot be resumed."""
    conversation_id = ctx.conversation_id
    if not conversation_id:
        raise ConfigurationError(
            f"{tool}: this Pydantic AI run has no conversation_id, so the call cannot be matched "
            "to a resumed run: pass agent.run(..., conversation_id='<stable id>')"
        )
    if _is_fresh(ctx, conversation_id):
        warn_once(
            "pydantic_ai.fresh_conversation_id",
            f"call4agents: tool {tool!r} ran under conversation_id {conversation_id!r}, which "
            "Pydantic AI generated for this run because none was passed and message_history "
            "carries none. If the process dies before you save the message history, a restart "
            "gets a new id and cannot be matched to what already ran. Pass a stable id, e.g. "
            "agent.run(..., conversation_id='ticket-1234'), or resume from the saved "
            "message_history.",
        )
    return conversation_id


def _is_fresh(ctx: RunContext[Any], conversation_id: str) -> bool:
    """Whether the id was generated for this very run rather than given or inherited.

    Pydantic AI does not say where the id came from. An inherited id is stamped on a message of an
    earlier run; a generated one is a UUID7 (durable engines derive theirs from the workflow run
    with another UUID version, and those do survive a replay).
    """
    for message in ctx.messages:
        if message.run_id != ctx.run_id and message.conversation_id == conversation_id:
            return False
    try:
        return uuid.UUID(conversation_id).version == 7
    except ValueError:
        return False
