"""The LangGraph rows of ``call4agents quickstart``, counted from real child processes.

A ``create_agent`` agent with an offline scripted model emails a customer; its child process is
SIGKILLed right after the email went out and before LangGraph saved the tools step, then a fresh
child resumes the thread with ``invoke(None, config)``. Once without Call4Agents, once with it.
The two scenarios run side by side, so the rows take about as long as two process starts.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import pathlib
import sqlite3
import uuid
from collections.abc import Sequence
from typing import Any

# The rows keep LangGraph's checkpoints in SQLite: without `call4agents-langgraph[sqlite]` this
# module does not import, and the quickstart shows no LangGraph rows.
import langgraph.checkpoint.sqlite  # noqa: F401

from call4agents.integration import quickstart_children as _children

_LABEL = "LangGraph, killed after sending, "
# What the child agents import, preloaded once by the server they are forked from.
CHILD_IMPORTS = ("langchain.agents", "langgraph.checkpoint.sqlite", "call4agents_langgraph")


def scenario(workdir: pathlib.Path, url: str) -> list[tuple[str, int, str]]:
    """Rows (label, emails counted, what happened) for the plain and the once-only agent."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        plain = pool.submit(_measure, workdir, url, "plain")
        once = pool.submit(_measure, workdir, url, "once")
        rows = [
            (_LABEL + "without Call4Agents", plain.result(), "the resume sent it again"),
            (_LABEL + "with Call4Agents", once.result(), "the resume got the recorded result"),
        ]
    return rows


def _measure(workdir: pathlib.Path, url: str, mode: str) -> int:
    thread = f"quickstart-{mode}-{uuid.uuid4().hex[:8]}"
    killed = _spawn(workdir, url, mode, thread, crash="after")
    resumed = _spawn(workdir, url, mode, thread, crash="none")
    if killed != _children.KILLED or resumed != 0:
        raise RuntimeError(f"the LangGraph quickstart agent ({mode}) did not run as expected")
    return _emails(workdir, thread)


def _spawn(workdir: pathlib.Path, url: str, mode: str, thread: str, *, crash: str) -> int:
    code, _, err = _children.run(_child, mode, workdir, url, thread, crash)
    if code not in (0, _children.KILLED):
        raise RuntimeError(f"the LangGraph quickstart agent failed:\n{err[-2000:]}")
    return code


def _emails(workdir: pathlib.Path, thread: str) -> int:
    outbox = workdir / f"langgraph-outbox-{thread}.txt"
    return len(outbox.read_text(encoding="utf-8").splitlines()) if outbox.exists() else 0


# -- the child ----------------------------------------------------------------------------------


def _child(mode: str, workdir: pathlib.Path, url: str, thread: str, crash: str) -> int:
    from langchain.agents import create_agent
    from langchain.agents.middleware import AgentMiddleware
    from langchain_core.messages import HumanMessage
    from langchain_core.tools import tool
    from langgraph.checkpoint.sqlite import SqliteSaver

    import call4agents as c4a

    from . import OnceOnly

    outbox = workdir / f"langgraph-outbox-{thread}.txt"

    @tool
    def send_email(to: str, body: str) -> str:
        """Email a customer."""
        with outbox.open("a", encoding="utf-8") as f:  # the outside world: one line per email
            f.write(json.dumps({"to": to, "body": body}) + "\n")
            f.flush()
            os.fsync(f.fileno())
        return f"sent to {to}"

    class KillAfterSending(AgentMiddleware):
        """Outermost: the email is out (and recorded, with Call4Agents); the step is not saved."""

        def wrap_tool_call(self, request: Any, handler: Any) -> Any:
            result = handler(request)
            if crash == "after":
                _children.kill_this_process()
            return result

    middleware: list[Any] = [KillAfterSending()]
    if mode == "once":
        c4a.init(url)
        middleware.append(OnceOnly())
    conn = sqlite3.connect(workdir / f"langgraph-checkpoints-{mode}.db", check_same_thread=False)
    try:
        agent = create_agent(
            _scripted_model(), [send_email], middleware=middleware, checkpointer=SqliteSaver(conn)
        )
        config: Any = {"configurable": {"thread_id": thread}}
        ask: Any = {"messages": [HumanMessage("Tell bob@example.com his refund is on its way")]}
        agent.invoke(ask if crash == "after" else None, config, durability="sync")
    finally:
        conn.close()
    return 0


def _scripted_model() -> Any:
    """An offline chat model: it emails bob after the user's message, then answers."""
    from langchain_core.language_models import BaseChatModel
    from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
    from langchain_core.outputs import ChatGeneration, ChatResult

    class ScriptedModel(BaseChatModel):
        @property
        def _llm_type(self) -> str:
            return "call4agents-quickstart"

        def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedModel:
            return self

        def _generate(self, messages: list[BaseMessage], *args: Any, **kw: Any) -> ChatResult:
            if isinstance(messages[-1], HumanMessage):
                args_ = {"to": "bob@example.com", "body": "Your refund is on its way"}
                call = {"name": "send_email", "args": args_, "id": "call_1", "type": "tool_call"}
                reply = AIMessage(content="", tool_calls=[call])
            else:
                reply = AIMessage(content="I emailed bob.")
            return ChatResult(generations=[ChatGeneration(message=reply)])

    return ScriptedModel()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m call4agents_langgraph.quickstart")
    parser.add_argument("--child", choices=("plain", "once"))
    parser.add_argument("--dir", type=pathlib.Path)
    parser.add_argument("--url")
    parser.add_argument("--thread")
    parser.add_argument("--crash", default="none")
    args = parser.parse_args(argv)
    if args.child:
        return _child(args.child, args.dir, args.url, args.thread, args.crash)
    _children.preload([f"{__package__}.quickstart", *CHILD_IMPORTS])
    import tempfile

    with tempfile.TemporaryDirectory(prefix="c4a-langgraph-") as tmp:
        workdir = pathlib.Path(tmp)
        for label, emails, outcome in scenario(workdir, f"sqlite:///{workdir / 'ledger.db'}"):
            print(f"{label:<52} {emails:>2} email(s)  {outcome}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
