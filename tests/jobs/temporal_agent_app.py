"""A Pydantic AI agent made durable by Temporal (``TemporalDurability``), for the Temporal tests.

Its model is a ``FunctionModel`` (offline): it asks for ``send_email`` once, then answers with the
tool's result. The tool is ``temporal_app.send``, so the job says where emails are counted,
whether the email is an ``@c4a.effect`` tool, and where the first attempt of the tool's activity
dies by SIGKILL.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any, ClassVar

from pydantic_ai import Agent, RunContext
from pydantic_ai.durable_exec.temporal import TemporalDurability
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.workflow import ActivityConfig

from call4agents_pydantic_ai import OnceOnly
from tests.jobs.temporal_app import Job, send


def llm(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    last = messages[-1].parts[-1]
    if last.part_kind == "tool-return":
        return ModelResponse(parts=[TextPart(f"Done: {last.content}")])
    return ModelResponse(parts=[ToolCallPart("send_email", {"to": "bob@example.com"})])


async def send_email(ctx: RunContext[Job], to: str) -> str:
    """Email a customer."""
    # Runs in a Temporal activity: the one the worker's OnceOnly interceptor names the run of.
    return send(replace(ctx.deps, to=to))


# Every activity heartbeats in the background: a dead worker is noticed in seconds, and the
# retry comes soon after.
ACTIVITIES = ActivityConfig(
    start_to_close_timeout=timedelta(minutes=5),
    heartbeat_timeout=timedelta(seconds=3),
    retry_policy=RetryPolicy(
        initial_interval=timedelta(milliseconds=200),
        backoff_coefficient=1.0,
        maximum_interval=timedelta(milliseconds=200),
    ),
)

agent = Agent(
    FunctionModel(llm),
    name="emailer",
    deps_type=Job,
    tools=[send_email],
    capabilities=[TemporalDurability(activity_config=ACTIVITIES)],
)


@workflow.defn
class EmailAgent:
    # PydanticAIPlugin registers the activities of the agents listed here.
    __pydantic_ai_agents__: ClassVar[list[Agent[Job, Any]]] = [agent]

    @workflow.run
    async def run(self, job: Job) -> str:
        result = await agent.run("Tell Bob his refund is on its way", deps=job)
        return result.output


# The Pydantic AI integration's capability on a Temporal agent: its hooks run in workflow code.
capped = Agent(
    FunctionModel(llm),
    name="capped-emailer",
    deps_type=Job,
    tools=[send_email],
    capabilities=[OnceOnly(), TemporalDurability(activity_config=ACTIVITIES)],
)


@workflow.defn
class CappedEmailAgent:
    __pydantic_ai_agents__: ClassVar[list[Agent[Job, Any]]] = [capped]

    @workflow.run
    async def run(self, job: Job) -> str:
        result = await capped.run("Tell Bob his refund is on its way", deps=job)
        return result.output
