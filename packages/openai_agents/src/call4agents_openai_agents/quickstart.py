"""The Agents SDK rows of ``call4agents quickstart``, counted from real child processes.

A support agent (a real ``Agent`` driven by the SDK's ``ScriptedModel``, so no network and no API
key) emails a customer through a ``send_email`` function tool and keeps its conversation in an
``SQLiteSession``. The child is killed with SIGKILL right after the email is written and before
the SDK saves the turn to the session; a fresh child then runs the same job again. Emails are
counted in an outbox file written by the tool, outside the ledger.

Run one child by hand: ``python -m call4agents_openai_agents.quickstart --child once --crash none
--dir DIR --url sqlite:///DIR/ledger.db --run job-1``.
"""

from __future__ import annotations

import argparse
import json
import os
import uuid
from pathlib import Path
from typing import Any

from call4agents.integration import quickstart_children as _children

LABEL = "OpenAI Agents SDK, killed after sending"
# What the child agents import, preloaded once by the server they are forked from.
CHILD_IMPORTS = ("agents", "agents.testing", "call4agents_openai_agents")
PROMPT = "Tell bob@example.com that his refund is on its way."


# -- the child: one agent run ---------------------------------------------------------------------


def _child(mode: str, crash: str, workdir: Path, url: str, run_id: str, schema: str | None) -> int:
    from agents import Agent, RunHooks, Runner, SQLiteSession, function_tool, set_tracing_disabled
    from agents.testing import ScriptedModel, assistant_message, function_call

    set_tracing_disabled(True)  # nothing leaves the machine
    outbox = workdir / f"oa-outbox-{mode}.jsonl"

    @function_tool
    def send_email(to: str, body: str) -> str:
        """Send an email to a customer."""
        with outbox.open("a", encoding="utf-8") as f:  # the outside world: one line per email
            f.write(json.dumps({"to": to, "body": body, "pid": os.getpid()}) + "\n")
            f.flush()
            os.fsync(f.fileno())
        if crash == "inside":
            _children.kill_this_process()  # sent, but the tool never returned
        return f"email sent to {to}"

    class KillAfterTool(RunHooks[Any]):
        async def on_tool_end(self, context: Any, agent: Any, tool: Any, result: object) -> None:
            # The tool returned (and the ledger, if any, recorded it); the SDK has not yet
            # written this turn to the session.
            _children.kill_this_process()

    # A real model would pick a new call id on the re-run; so does this one.
    call = {"to": "bob@example.com", "body": "Your refund is on its way."}
    model = ScriptedModel(
        [
            [function_call("send_email", call, call_id=f"call_{os.getpid()}")],
            [assistant_message("I emailed Bob about his refund.")],
        ]
    )
    agent = Agent(name="support", instructions="Help customers.", model=model, tools=[send_email])
    session: Any = SQLiteSession(run_id, str(workdir / f"oa-session-{mode}.db"))
    if mode == "once":
        import call4agents as c4a
        from call4agents_openai_agents import OnceOnly

        c4a.init(url, schema=schema, lease=600.0, wait=30.0)
        once = OnceOnly()
        agent, session = once.wrap(agent), once.session(session)
    hooks = KillAfterTool() if crash == "after" else None
    result = Runner.run_sync(agent, PROMPT, session=session, hooks=hooks)
    outputs = [str(i.output) for i in result.new_items if i.type == "tool_call_output_item"]
    report = {"final": result.final_output, "tool_outputs": outputs}
    (workdir / f"oa-result-{mode}.json").write_text(json.dumps(report), encoding="utf-8")
    return 0


# -- the parent -----------------------------------------------------------------------------------


def spawn(
    mode: str,
    crash: str,
    workdir: Path,
    url: str,
    run_id: str,
    *,
    schema: str | None = None,
    env: dict[str, str] | None = None,
) -> _children.Child:
    """Start one child agent (a new process); wait on it for its exit (or SIGKILL)."""
    child_env = dict(os.environ if env is None else env, OPENAI_AGENTS_DISABLE_TRACING="1")
    return _children.Child(_child, mode, crash, workdir, url, run_id, schema, env=child_env)


def result(workdir: Path, mode: str) -> dict[str, Any]:
    """What the last child of ``mode`` reported: its final output and the tool outputs."""
    found: dict[str, Any] = json.loads((workdir / f"oa-result-{mode}.json").read_text())
    return found


def emails(workdir: Path, mode: str) -> int:
    outbox = workdir / f"oa-outbox-{mode}.jsonl"
    return len(outbox.read_text(encoding="utf-8").splitlines()) if outbox.exists() else 0


def _round(workdir: Path, url: str, runs: dict[str, str], crash: str) -> dict[str, int]:
    """One child per mode, side by side; their exit codes."""
    children = {mode: spawn(mode, crash, workdir, url, run_id) for mode, run_id in runs.items()}
    try:
        return {mode: child.wait(120) for mode, child in children.items()}
    finally:
        for child in children.values():
            child.close()


def scenario(workdir: Path, url: str) -> list[tuple[str, int, str]]:
    """The quickstart rows: (label, emails counted, what happened)."""
    runs = {mode: f"quickstart-oa-{mode}-{uuid.uuid4().hex[:8]}" for mode in ("plain", "once")}
    killed = _round(workdir, url, runs, "after")
    if set(killed.values()) != {_children.KILLED}:
        raise RuntimeError(f"the Agents SDK children were not killed as planned: {killed}")
    resumed = _round(workdir, url, runs, "none")
    if set(resumed.values()) != {0}:
        raise RuntimeError(f"a resumed Agents SDK child failed: {resumed}")
    return [
        (
            f"{LABEL}, without Call4Agents",
            emails(workdir, "plain"),
            "the resumed run sent it again",
        ),
        (
            f"{LABEL}, with Call4Agents",
            emails(workdir, "once"),
            "the resumed run got the recorded result",
        ),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m call4agents_openai_agents.quickstart")
    parser.add_argument("--child", choices=["plain", "once"])
    parser.add_argument("--crash", choices=["none", "after", "inside"], default="none")
    parser.add_argument("--dir", type=Path)
    parser.add_argument("--url")
    parser.add_argument("--run")
    parser.add_argument("--schema", help="PostgreSQL schema of the ledger")
    args = parser.parse_args(argv)
    if args.child:
        return _child(args.child, args.crash, args.dir, args.url, args.run, args.schema)
    _children.preload([f"{__package__}.quickstart", *CHILD_IMPORTS])
    import tempfile
    import time

    started = time.monotonic()

    with tempfile.TemporaryDirectory(prefix="c4a-oa-quickstart-") as tmp:
        url = args.url or f"sqlite:///{Path(tmp) / 'ledger.db'}"
        for label, count, what in scenario(Path(tmp), url):
            print(f"{label:<60} {count:>2}  {what}")
    print(f"({time.monotonic() - started:.1f}s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
