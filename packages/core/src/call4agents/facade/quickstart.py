"""`call4agents quickstart`: watch an agent get killed after sending an email, and resume.

Every number printed is counted from an outbox file written by real child processes; each child
is killed at once (SIGKILL; TerminateProcess on Windows) at the named moment and a fresh child
resumes the same run.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import importlib
import json
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from . import _children

# Exit codes of the child agent, so the parent can tell what the resume met.
_DONE, _IN_DOUBT = 0, 3


# -- the child: a tiny agent with a checkpoint, like a framework's saved state -----------------


def _child(mode: str, workdir: Path, url: str, run_id: str, crash: str) -> int:
    outbox = workdir / f"outbox-{mode}.txt"
    checkpoint = workdir / f"checkpoint-{mode}.json"

    def deliver(to: str, body: str) -> str:
        with outbox.open("a", encoding="utf-8") as f:  # the outside world: one line per email
            f.write(json.dumps({"to": to, "body": body}) + "\n")
            f.flush()
            os.fsync(f.fileno())
        if crash == "inside":
            _children.kill_this_process()  # sent, but the tool never returned
        return f"msg-{sum(1 for _ in outbox.open(encoding='utf-8'))}"

    if mode == "plain":
        send_email = deliver
    else:
        import call4agents as c4a

        c4a.init(url)
        send_email = c4a.effect(name="send_email")(deliver)

    state = json.loads(checkpoint.read_text()) if checkpoint.exists() else {"step": 0}
    if state["step"] == 0:  # the agent decided to email the customer
        try:
            if mode == "plain":
                message_id = send_email("bob@example.com", "Your refund is on its way")
            else:
                with c4a.run(run_id):
                    message_id = send_email("bob@example.com", "Your refund is on its way")
        except Exception as exc:
            if type(exc).__name__ == "EffectInDoubt":
                print(str(exc), file=sys.stderr)
                return _IN_DOUBT
            raise
        if crash == "after":
            _children.kill_this_process()  # sent and returned; checkpoint not yet saved
        checkpoint.write_text(json.dumps({"step": 1, "message_id": message_id}))
    return _DONE


# -- the parent: run the scenarios and count ----------------------------------------------------


@dataclass
class Row:
    label: str
    emails: int
    outcome: str
    run_id: str = ""  # a run worth a look in the ledger afterwards


def _spawn(mode: str, workdir: Path, url: str, run_id: str, crash: str) -> int:
    code, _, err = _children.run(_child, mode, workdir, url, run_id, crash)
    if code not in (_DONE, _IN_DOUBT, _children.KILLED):
        raise RuntimeError(f"the quickstart agent failed unexpectedly (exit code {code}):\n{err}")
    return code


def _emails(workdir: Path, mode: str) -> int:
    outbox = workdir / f"outbox-{mode}.txt"
    return sum(1 for _ in outbox.open(encoding="utf-8")) if outbox.exists() else 0


def _scenario_after(workdir: Path, url: str, mode: str) -> Row:
    run_id = f"quickstart-{uuid.uuid4().hex[:8]}"
    killed = _spawn(mode, workdir, url, run_id, crash="after")
    resumed = _spawn(mode, workdir, url, run_id, crash="none")
    assert killed == _children.KILLED
    assert resumed == _DONE
    n = _emails(workdir, mode)
    if mode == "plain":
        return Row("killed right after sending, without Call4Agents", n, "sent again on resume")
    return Row("killed right after sending, with Call4Agents", n, "resume got the recorded result")


def _scenario_inside(workdir: Path, url: str) -> Row:
    import call4agents as c4a

    mode, run_id = "inside", f"quickstart-{uuid.uuid4().hex[:8]}"
    _spawn(mode, workdir, url, run_id, crash="inside")
    if _spawn(mode, workdir, url, run_id, crash="none") != _IN_DOUBT:
        raise RuntimeError("the resumed agent was expected to find the email in doubt")
    with c4a.Ledger(url) as ledger:
        [doubt] = [r for r in ledger.in_doubt() if r.run_id == run_id]
        # A person looks in the outbox, finds the email, and records that it happened.
        ledger.resolve(
            doubt.key, happened=True, result="msg-1", by="quickstart", note="found in the outbox"
        )
    resumed = _spawn(mode, workdir, url, run_id, crash="none")
    assert resumed == _DONE
    return Row(
        "killed inside the tool, with Call4Agents",
        _emails(workdir, mode),
        "in doubt, not re-sent; resolved by a person; resumed",
        run_id,
    )


# Each installed integration adds its own rows, measured from its framework's real agent.
_INTEGRATIONS = (
    "call4agents_langgraph",
    "call4agents_pydantic_ai",
    "call4agents_openai_agents",
    "call4agents_mcp",
)
Scenario = Callable[[Path, str], list[tuple[str, int, str]]]


def _integrations() -> list[Any]:
    """The quickstart modules of the installed integrations."""
    found = []
    for package in _INTEGRATIONS:
        try:
            found.append(importlib.import_module(f"{package}.quickstart"))
        except ImportError:
            continue  # not installed (or its framework is not): no row for it
    return found


def child_imports() -> list[str]:
    """What the quickstart's children import, core and installed integrations, to preload."""
    names = ["call4agents", __name__]
    for module in _integrations():
        names += [module.__name__, *module.CHILD_IMPORTS]
    return names


def _integration_scenarios() -> dict[str, Scenario]:
    """Each installed integration's rows, by package; its children's imports are preloaded."""
    _children.preload(child_imports())
    return {module.__package__: module.scenario for module in _integrations()}


def _rows(scenario: Scenario, folder: Path, url: str) -> list[Row]:
    return [Row(*row) for row in scenario(folder, url)]


# The kept demo ledger, in the folder the quickstart runs in: the printed next step reads it.
KEPT_LEDGER = Path(".c4a") / "quickstart.db"
_WIDTH = 60  # the longest row label: rows are printed as they finish, so no measuring first


def _say(line: str = "") -> None:
    print(line, flush=True)  # each line at once, also when stdout is a pipe


def _title() -> None:
    _say("Call4Agents quickstart: an agent emails a customer and is killed with SIGKILL.")
    _say("A fresh process resumes the same run; emails are counted in the outbox.\n")
    _say(f"  {'scenario':<{_WIDTH}}  emails  what happened")


def _row(row: Row) -> None:
    _say(f"  {row.label:<{_WIDTH}}  {row.emails:>6}  {row.outcome}")


def _prog() -> str:
    """How to run this `call4agents` again from this folder, as the user's shell will find it."""
    script = Path(sys.argv[0]).absolute()
    if script.name != "call4agents":  # python -m call4agents
        return f"{_shown_path(Path(sys.executable))} -m call4agents"
    found = shutil.which("call4agents")
    if script.is_relative_to(Path.cwd()) or found is None or not Path(found).samefile(script):
        return _shown_path(script)  # e.g. .venv/bin/call4agents after scripts/quickstart
    return "call4agents"


def _shown_path(path: Path) -> str:
    return str(path.relative_to(Path.cwd())) if path.is_relative_to(Path.cwd()) else str(path)


def _next_steps(url_arg: str, run_id: str, seconds: float) -> None:
    prog = _prog()
    _say(f"\nDone in {seconds:.1f}s, offline, no API keys.")
    _say("Next, what the ledger recorded, and the action that was in doubt and settled:")
    _say(f"  {prog} runs {url_arg}")
    _say(f"  {prog} show {run_id} {url_arg}")
    _say(f"Actions in doubt: `{prog} doubt {url_arg}`; `{prog} resolve` settles one.")
    _say("The same runs in the operator console, in a browser (Ctrl-C stops it):")
    _say(f"  {prog} console {url_arg}")


def _check_ledger(url: str) -> None:
    """Open the ledger before any child starts: a bad --url fails here, in one line."""
    from .ledger import Ledger

    with Ledger(url, open_retry=0):
        pass


def _scenarios(workdir: Path, url: str) -> list[Callable[[], list[Row]]]:
    scenarios: list[Callable[[], list[Row]]] = [
        lambda: [_scenario_after(workdir, url, "plain")],
        lambda: [_scenario_after(workdir, url, "ledger")],
        lambda: [_scenario_inside(workdir, url)],
    ]
    for package, scenario in _integration_scenarios().items():
        (workdir / package).mkdir()
        scenarios.append(partial(_rows, scenario, workdir / package, url))
    return scenarios


def _run_all(scenarios: list[Callable[[], list[Row]]]) -> list[Row]:
    """Side by side (each scenario mostly waits for its children); rows printed as they end."""
    rows: list[Row] = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(scenarios)) as pool:
        for done in concurrent.futures.as_completed([pool.submit(run) for run in scenarios]):
            for row in done.result():
                _row(row)
                rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="call4agents quickstart")
    parser.add_argument(
        "--url", help=f"ledger URL (default: {KEPT_LEDGER} in this folder, kept for a look after)"
    )
    args = parser.parse_args(argv)
    url = args.url or f"sqlite:///{KEPT_LEDGER.absolute()}"
    _check_ledger(url)
    started = time.monotonic()
    _title()
    with tempfile.TemporaryDirectory(prefix="c4a-quickstart-") as tmp:
        rows = _run_all(_scenarios(Path(tmp), url))
    [run_id] = [row.run_id for row in rows if row.run_id]
    if sys.version_info < (3, 11):
        _say("\nNo LangGraph or Pydantic AI rows: LangChain 1.x and Pydantic AI 2.x need Python")
        _say(f"3.11, and this is Python {sys.version_info[0]}.{sys.version_info[1]}.")
    url_arg = f"--url {_shown_url(args.url) if args.url else f'sqlite:///{KEPT_LEDGER}'}"
    _next_steps(url_arg, run_id, time.monotonic() - started)
    return 0


def _shown_url(url: str) -> str:
    from call4agents.storage import urls

    return urls.safe_url(urls.parse_url(url))


if __name__ == "__main__":
    raise SystemExit(main())
