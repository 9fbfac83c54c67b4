"""The Pydantic AI rows of ``call4agents quickstart``, counted from real child processes.

A Pydantic AI agent (Pydantic AI's offline ``FunctionModel``) emails a customer; the app saves the
message history after every step. The child is SIGKILLed after the email went out and before the
history holding its result was saved, and a fresh child resumes from the saved history, which
makes Pydantic AI run the pending call again. Emails are lines in an outbox file.
"""

from __future__ import annotations

import argparse
import json
import os
import uuid
from pathlib import Path
from typing import Any

from call4agents.integration import quickstart_children as _children

PLAIN = "Pydantic AI, killed after sending, without Call4Agents"
LEDGER = "Pydantic AI, killed after sending, with Call4Agents"
# What the child agents import, preloaded once by the server they are forked from.
CHILD_IMPORTS = ("pydantic_ai", "call4agents_pydantic_ai")


def scenario(workdir: Path, url: str) -> list[tuple[str, int, str]]:
    """Two rows: (label, emails counted, what happened), without and with ``OnceOnly``."""
    conversation = f"quickstart-{uuid.uuid4().hex[:8]}"
    modes = ("plain", "ledger")
    killed = _run_all([(m, workdir, url, conversation, True) for m in modes])
    if killed != [_children.KILLED] * 2:
        raise RuntimeError(f"the Pydantic AI agents were not killed as planned: {killed}")
    resumed = _run_all([(m, workdir, url, conversation, False) for m in modes])
    if resumed != [0, 0]:
        raise RuntimeError(f"the resumed Pydantic AI agents failed: {resumed}")
    return [
        (PLAIN, _emails(workdir, "plain"), "resumed from the saved history: sent again"),
        (LEDGER, _emails(workdir, "ledger"), "resumed from the saved history: recorded result"),
    ]


def _run_all(jobs: list[tuple[str, Path, str, str, bool]]) -> list[int]:
    """Run the children side by side (the row stays a few seconds); their exit codes."""
    children = [_children.Child(_child, *job, env=None) for job in jobs]
    codes = []
    try:
        for child in children:
            code = child.wait(120)
            if code not in (0, _children.KILLED):
                raise RuntimeError(f"the Pydantic AI quickstart agent failed:\n{child.stderr}")
            codes.append(code)
    finally:
        for child in children:
            child.close()
    return codes


def _emails(workdir: Path, mode: str) -> int:
    outbox = workdir / f"pydantic-ai-outbox-{mode}.jsonl"
    return len(outbox.read_text(encoding="utf-8").splitlines()) if outbox.exists() else 0


# -- the child: a Pydantic AI agent whose app saves the history after every step ----------------


def _child(mode: str, workdir: Path, url: str, conversation: str, crash: bool) -> int:
    import asyncio

    from pydantic_ai import Agent, ModelRequestNode
    from pydantic_ai.messages import ModelMessagesTypeAdapter, ToolReturnPart

    outbox = workdir / f"pydantic-ai-outbox-{mode}.jsonl"
    saved = workdir / f"pydantic-ai-history-{mode}.json"

    def send_email(to: str, body: str) -> str:
        """Email a customer."""
        with outbox.open("a", encoding="utf-8") as f:  # the outside world: one line per email
            f.write(json.dumps({"to": to, "body": body}) + "\n")
            f.flush()
            os.fsync(f.fileno())
        return f"sent to {to}"

    capabilities: list[Any] = []
    if mode == "ledger":
        import call4agents as c4a

        from ._capability import OnceOnly

        c4a.init(url)
        capabilities.append(OnceOnly())
    agent = Agent(_model(), tools=[send_email], capabilities=capabilities)

    async def main() -> None:
        history = (
            ModelMessagesTypeAdapter.validate_json(saved.read_bytes()) if saved.exists() else None
        )
        prompt = None if history else "Tell Bob his refund is on its way"
        async with agent.iter(prompt, message_history=history, conversation_id=conversation) as run:
            async for node in run:
                results = isinstance(node, ModelRequestNode) and any(
                    isinstance(p, ToolReturnPart) for p in node.request.parts
                )
                if crash and results:
                    _children.kill_this_process()  # sent; its result not saved yet
                saved.write_bytes(ModelMessagesTypeAdapter.dump_json(run.all_messages()))

    asyncio.run(main())
    return 0


def _model() -> Any:
    from pydantic_ai.messages import (
        ModelMessage,
        ModelResponse,
        TextPart,
        ToolCallPart,
        ToolReturnPart,
    )
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        done = [p for p in messages[-1].parts if isinstance(p, ToolReturnPart)]
        if done:
            return ModelResponse(parts=[TextPart(f"Done: {done[0].content}")])
        args = {"to": "bob@example.com", "body": "Your refund is on its way"}
        return ModelResponse(parts=[ToolCallPart("send_email", args, tool_call_id="call-1")])

    return FunctionModel(respond)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m call4agents_pydantic_ai.quickstart")
    parser.add_argument("--child", choices=["plain", "ledger"])
    parser.add_argument("--dir", type=Path)
    parser.add_argument("--url", default=None)
    parser.add_argument("--conversation", default="quickstart")
    parser.add_argument("--crash", action="store_true")
    args = parser.parse_args(argv)
    if args.child:
        return _child(args.child, args.dir, args.url, args.conversation, args.crash)
    _children.preload([f"{__package__}.quickstart", *CHILD_IMPORTS])
    import tempfile

    with tempfile.TemporaryDirectory(prefix="c4a-pydantic-ai-") as tmp:
        url = args.url or f"sqlite:///{Path(tmp) / 'ledger.db'}"
        for label, emails, what in scenario(Path(tmp), url):
            print(f"{label:<56} {emails:>2} email(s)  {what}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
