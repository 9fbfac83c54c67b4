"""A worker running an emailing agent under a budget; SIGKILLed after its Nth email if asked.

Usage: budget_child.py RUN_ID OUTBOX KIND LIMIT [KILL_AFTER]

KIND is ``tool_calls`` or ``model_requests`` (which limit of the budget is LIMIT). The model asks
for one email per turn to each of $RECIPIENTS (default u0,u1,u2,u3), with call ids this process
makes up, as a real model would on a re-run. With KILL_AFTER the process kills itself right after
that many emails are in the outbox (the ledger has recorded the last one; the SDK has not moved
on). Prints ``{"ended": "done" | <the budget's reason>}``. The ledger comes from
C4A_TEST_URL/C4A_TEST_SCHEMA.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

from agents import Agent, RunHooks, Runner, function_tool, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call

import call4agents as c4a
from call4agents_openai_agents import OnceOnly

set_tracing_disabled(True)


def main(run_id: str, outbox: Path, kind: str, limit: int, kill_after: int | None) -> str:
    c4a.init(os.environ["C4A_TEST_URL"], schema=os.environ.get("C4A_TEST_SCHEMA") or None)

    @function_tool
    def send_email(to: str) -> str:
        """Send an email."""
        with outbox.open("a", encoding="utf-8") as f:  # the outside world
            f.write(json.dumps({"to": to, "pid": os.getpid()}) + "\n")
            f.flush()
            os.fsync(f.fileno())
        return f"sent to {to}"

    class KillAfter(RunHooks[Any]):
        async def on_tool_end(self, context: Any, agent: Any, tool: Any, result: object) -> None:
            if kill_after is not None and len(outbox.read_text().splitlines()) >= kill_after:
                os.kill(os.getpid(), signal.SIGKILL)

    people = os.environ.get("RECIPIENTS", "u0,u1,u2,u3").split(",")
    steps: list[Any] = [
        [function_call("send_email", {"to": p}, call_id=f"call_{os.getpid()}_{p}")] for p in people
    ]
    model = ScriptedModel([*steps, [assistant_message("all sent")]])
    if kind == "tool_calls":
        budget = c4a.Budget(max_tool_calls=limit)
    else:
        budget = c4a.Budget(max_model_requests=limit)
    once = OnceOnly(budget=budget)
    agent = once.wrap(Agent(name="mailer", model=model, tools=[send_email]))
    try:
        Runner.run_sync(
            agent, "email everyone", context={"call4agents_run_id": run_id}, hooks=KillAfter()
        )
    except c4a.BudgetExceeded as exc:
        return exc.reason
    return "done"


if __name__ == "__main__":
    kill = int(sys.argv[5]) if len(sys.argv) > 5 else None
    ended = main(sys.argv[1], Path(sys.argv[2]), sys.argv[3], int(sys.argv[4]), kill)
    print(json.dumps({"ended": ended}))
