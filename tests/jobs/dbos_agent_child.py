"""A Pydantic AI agent run durably by DBOS (``DBOSAgent``), its email tool under the Pydantic AI
integration's ``OnceOnly`` capability, run as a child process.

``dbos_agent_child.py SYSDB EMAILS MODE STEP``: MODE ``bare``, ``once`` (with the capability) or
``once-given`` (with it, and the workflow id passed as the run's ``conversation_id``).
STEP ``kill`` starts the agent's workflow and dies by SIGKILL when the model is asked again after
the tool sent the email (the tool ran in workflow code, so DBOS has no record of it);
``recover`` launches DBOS, which recovers the workflow, and prints the agent's output as JSON.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

from dbos import DBOS, SetWorkflowID
from pydantic_ai import Agent
from pydantic_ai.durable_exec.dbos import DBOSAgent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

import call4agents as c4a
from call4agents_pydantic_ai import OnceOnly

SYSDB, EMAILS, MODE, STEP = sys.argv[1], Path(sys.argv[2]), sys.argv[3], sys.argv[4]
WORKFLOW = "agent-1"
# MODE once-given passes the workflow id as the conversation id: the run DBOS records and replays.
RUN = {"conversation_id": WORKFLOW} if MODE == "once-given" else {}

DBOS(
    config={
        "name": "c4a-agent",
        "system_database_url": SYSDB,
        "application_version": "1",
        "log_level": "ERROR",
    }
)
c4a.init(os.environ["C4A_TEST_URL"])


def send_email(to: str) -> str:
    """Email a customer."""
    with EMAILS.open("a") as f:
        f.write(to + "\n")
    return f"sent to {to}"


def llm(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    if messages[-1].parts[-1].part_kind == "tool-return":
        if STEP == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        return ModelResponse(parts=[TextPart(f"Done: {messages[-1].parts[-1].content}")])
    return ModelResponse(parts=[ToolCallPart("send_email", {"to": "bob@example.com"})])


capabilities = [OnceOnly()] if MODE.startswith("once") else []
agent = Agent(FunctionModel(llm), name="emailer", tools=[send_email], capabilities=capabilities)
durable = DBOSAgent(agent)

DBOS.launch()
if STEP == "kill":
    with SetWorkflowID(WORKFLOW):
        durable.run_sync("Tell Bob his refund is on its way", **RUN)
    sys.exit("the agent finished although its process was to be killed")
result = DBOS.retrieve_workflow(WORKFLOW).get_result()
print(json.dumps({"output": result.output}))
DBOS.destroy()
