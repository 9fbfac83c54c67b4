"""`call4agents quickstart`: watch an agent get killed after sending an email, and resume.

Every number printed is counted from an outbox file written by real child processes; each child
is killed with SIGKILL at the named moment and a fresh child resumes the same run.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import importlib
import json
import os
import signal
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
            os.kill(os.getpid(), signal.SIGKILL)  # sent, but the tool never returned
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
            os.kill(os.getpid(), signal.SIGKILL)  # sent and returned; checkpoint not yet saved
        checkpoint.write_text(json.dumps({"step": 1, "message_id": message_id}))
    return _DONE


# -- the parent: run the scenarios and count ----------------------------------------------------


@dataclass
class Row:
    label: str
    emails: int
    outcome: str


def _spawn(mode: str, workdir: Path, url: str, run_id: str, crash: str) -> int:
    code, _, err = _children.run(_child, mode, workdir, url, run_id, crash)
    if code not in (_DONE, _IN_DOUBT, -signal.SIGKILL):
        raise RuntimeError(f"the quickstart agent failed unexpectedly (exit code {code}):\n{err}")
    return code


def _emails(workdir: Path, mode: str) -> int:
    outbox = workdir / f"outbox-{mode}.txt"
    return sum(1 for _ in outbox.open(encoding="utf-8")) if outbox.exists() else 0


def _scenario_after(workdir: Path, url: str, mode: str) -> Row:
    run_id = f"quickstart-{uuid.uuid4().hex[:8]}"
    killed = _spawn(mode, workdir, url, run_id, crash="after")
    resumed = _spawn(mode, workdir, url, run_id, crash="none")
    assert killed == -signal.SIGKILL
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
    names = ["call4agents", "call4agents.quickstart"]
    for module in _integrations():
        names += [module.__name__, *module.CHILD_IMPORTS]
    return names


def _integration_scenarios() -> dict[str, Scenario]:
    """Each installed integration's rows, by package; its children's imports are preloaded."""
    _children.preload(child_imports())
    return {module.__package__: module.scenario for module in _integrations()}


def _rows(scenario: Scenario, folder: Path, url: str) -> list[Row]:
    return [Row(*row) for row in scenario(folder, url)]


def _print(rows: list[Row], seconds: float) -> None:
    width = max(len(r.label) for r in rows)
    print("Call4Agents quickstart: an agent emails a customer and is killed with SIGKILL.")
    print("A fresh process resumes the same run; emails are counted in the outbox.\n")
    print(f"  {'scenario':<{width}}  emails  what happened")
    for row in rows:
        print(f"  {row.label:<{width}}  {row.emails:>6}  {row.outcome}")
    print(f"\nDone in {seconds:.1f}s, offline, no API keys.")
    print("Next: `call4agents doubt` lists actions in doubt; `call4agents resolve` settles them.")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="call4agents quickstart")
    parser.add_argument("--url", help="ledger URL (default: a fresh SQLite file in a temp folder)")
    args = parser.parse_args(argv)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="c4a-quickstart-") as tmp:
        workdir = Path(tmp)
        url = args.url or f"sqlite:///{workdir / 'ledger.db'}"
        scenarios: list[Callable[[], list[Row]]] = [
            lambda: [_scenario_after(workdir, url, "plain")],
            lambda: [_scenario_after(workdir, url, "ledger")],
            lambda: [_scenario_inside(workdir, url)],
        ]
        for package, scenario in _integration_scenarios().items():
            (workdir / package).mkdir()
            scenarios.append(partial(_rows, scenario, workdir / package, url))
        # Side by side: each scenario mostly waits for its children.
        with concurrent.futures.ThreadPoolExecutor(max_workers=len(scenarios)) as pool:
            rows = [row for rows in pool.map(lambda run: run(), scenarios) for row in rows]
    _print(rows, time.monotonic() - started)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
