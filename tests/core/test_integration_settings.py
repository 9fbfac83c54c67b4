"""What every integration's ``OnceOnly`` is given is checked once, in ``call4agents.integration``:
each bad shared setting gets one one-line message, the same from all four integrations, and an
integration refuses to import over a foreign ``call4agents`` with the exact ``pip install`` fix.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import call4agents as c4a
from call4agents.integration import OnceOnlySettings, check_ledger
from call4agents_langgraph import OnceOnly as LangGraphOnceOnly
from call4agents_mcp import OnceOnly as MCPOnceOnly
from call4agents_openai_agents import OnceOnly as AgentsOnceOnly
from call4agents_pydantic_ai import OnceOnly as PydanticOnceOnly
from tests.conftest import Target

FIELDS = (
    "name, kind, key, ignore, redact, scope, retry_in_doubt, check, in_doubt_on, wait, lease, "
    "ledger, approval, approval_ttl, max_per_run, credentials, undo, find_existing, escalate_on"
)
TOOL = "OnceOnly(tools={'send_email': ...})"

# One bad value of each shared setting, and the whole message it gets.
BAD: list[tuple[dict[str, Any], str]] = [
    (
        {"ledger": "sqlite:///ledger.db"},
        "OnceOnly(ledger=...) takes an open c4a.Ledger, or None (c4a.init()'s); got str",
    ),
    (
        {"default": {"kind": "read"}},
        "OnceOnly(default=...) takes a c4a.EffectOptions(...), not dict",
    ),
    (
        {"budget": {"max_tool_calls": 3}},
        "OnceOnly(budget=...) takes a c4a.Budget, e.g. c4a.Budget(max_tool_calls=20, "
        "max_model_requests=10), not dict",
    ),
    (
        {"tools": ["send_email"]},
        'OnceOnly(tools=...) takes a dict of options by tool name, e.g. {"lookup": {"kind": '
        '"read"}}, not list',
    ),
    (
        {"tools": {"send_email": "read"}},
        f"{TOOL} must be EffectOptions or a dict of its fields, not str",
    ),
    (
        {"tools": {"send_email": {"kinds": "read"}}},
        f"{TOOL}: unknown option(s) kinds. Valid fields: {FIELDS}",
    ),
    (
        {"tools": {"send_email": {"kind": "reads"}}},
        f"{TOOL}: kind='reads' is not one of none, read, write, irreversible",
    ),
    (
        {"tools": {"send_email": {"undo": "refund"}}},
        f"{TOOL}: undo= for send_email must be callable, got str",
    ),
    (
        {"escalate_on": ["in_doubt", "timeout"]},
        "escalate_on=['timeout'] is not understood (in OnceOnly): use any of 'denied', "
        "'in_doubt', 'budget'",
    ),
    (
        {"trigger": "cron"},
        "OnceOnly(trigger='cron') is not a known trigger: use one of 'user', 'schedule', "
        "'webhook', 'retry' ('retry' is also set by the ledger itself)",
    ),
]
BAD_RUN_IDS: list[tuple[dict[str, Any], str]] = [
    (
        {"run_id": " "},
        "run id ' ' is not usable: give a non-empty string that stays the same when the agent "
        "resumes (a ticket id, a thread id, a job id)",
    ),
    (
        {"run_id": 1234},
        "OnceOnly(run_id=...) takes a stable id (a string) or a function returning one, not int",
    ),
]
INTEGRATIONS = {
    "langgraph": LangGraphOnceOnly,
    "pydantic_ai": PydanticOnceOnly,
    "openai_agents": AgentsOnceOnly,
    "mcp": MCPOnceOnly,
}


def _ids(cases: list[tuple[dict[str, Any], str]]) -> list[str]:
    return [f"{name}={value!r}"[:40] for settings, _ in cases for name, value in settings.items()]


@pytest.mark.parametrize(("settings", "message"), BAD + BAD_RUN_IDS, ids=_ids(BAD + BAD_RUN_IDS))
def test_each_bad_setting_gets_its_one_line_message(settings: dict[str, Any], message: str) -> None:
    with pytest.raises(c4a.ConfigurationError) as refused:
        OnceOnlySettings.check(**settings)
    assert str(refused.value) == message
    assert "\n" not in message


def test_the_owner_named_is_the_one_given() -> None:
    with pytest.raises(c4a.ConfigurationError, match=r"^Server\(budget=\.\.\.\) takes"):
        OnceOnlySettings.check(budget=5, owner="Server")


def test_good_settings_are_kept_checked_and_resolved(sqlite_target: Target) -> None:
    ledger = sqlite_target.open()
    default = c4a.EffectOptions(kind="irreversible")
    budget = c4a.Budget(max_tool_calls=3)
    settings = OnceOnlySettings.check(
        ledger=ledger,
        tools={"lookup": {"kind": "read"}, "refund": c4a.EffectOptions(approval=True)},
        default=default,
        budget=budget,
        escalate_on="in_doubt",  # a lone outcome, as c4a.EffectOptions takes it
        trigger="webhook",
        run_id="ticket-1234",
    )
    assert settings.ledger is ledger
    assert (settings.budget, settings.default) == (budget, default)
    # A dict is laid over the default; an EffectOptions stands alone; both get the tool's name.
    assert settings.tools["lookup"] == c4a.EffectOptions(name="lookup", kind="read")
    assert settings.tools["refund"] == c4a.EffectOptions(name="refund", approval=True)
    assert settings.escalate_on == frozenset({"in_doubt"})
    assert (settings.trigger, settings.run_id) == ("webhook", "ticket-1234")
    with pytest.raises(TypeError):
        settings.tools["other"] = default  # type: ignore[index]
    assert OnceOnlySettings.check() == OnceOnlySettings()


def test_a_run_id_function_is_kept_as_given() -> None:
    def run_id_of(context: object) -> str:
        return "ticket-1234"

    assert OnceOnlySettings.check(run_id=run_id_of).run_id is run_id_of


@pytest.mark.parametrize("name", list(INTEGRATIONS))
@pytest.mark.parametrize(("settings", "message"), BAD, ids=_ids(BAD))
def test_every_integration_gives_the_same_message(
    name: str, settings: dict[str, Any], message: str
) -> None:
    with pytest.raises(c4a.ConfigurationError) as refused:
        INTEGRATIONS[name](**settings)
    assert str(refused.value) == message


@pytest.mark.parametrize(("settings", "message"), BAD_RUN_IDS, ids=_ids(BAD_RUN_IDS))
def test_the_agents_sdk_run_id_is_checked_by_the_same_settings(
    settings: dict[str, Any], message: str
) -> None:
    with pytest.raises(c4a.ConfigurationError) as refused:
        AgentsOnceOnly(**settings)
    assert str(refused.value) == message


def test_a_job_queue_ledger_may_also_be_a_url() -> None:
    check_ledger("postgresql+psycopg://host/db", "Jobs", url=True)
    with pytest.raises(c4a.ConfigurationError, match=r"^Jobs\(ledger='jobs\.db'\) is not a ledger"):
        check_ledger("jobs.db", "Jobs", url=True)
    with pytest.raises(c4a.ConfigurationError, match=r"^Jobs\(ledger=\.\.\.\) takes a ledger URL"):
        check_ledger(5, "Jobs", url=True)


@pytest.mark.parametrize(
    ("module", "extra"),
    [
        ("call4agents_langgraph", "langgraph"),
        ("call4agents_pydantic_ai", "pydantic-ai"),
        ("call4agents_openai_agents", "openai-agents"),
        ("call4agents_mcp", "mcp"),
    ],
)
def test_an_integration_over_a_foreign_call4agents_names_the_fix(
    tmp_path: Path, module: str, extra: str
) -> None:
    # PyPI's unrelated `call4agents` installed over the core replaces the package's __init__
    # and leaves the core's other modules in place, as this copy does.
    copy = tmp_path / "call4agents"
    shutil.copytree(Path(c4a.__file__).parent, copy, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "__init__.py").write_text('"""Another project."""\n__version__ = "0.5.3"\n')
    code = f"import {module} as m; m.OnceOnly"  # MCP's names load on first use
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode != 0
    assert done.stderr.splitlines()[-1] == (
        "ImportError: the installed `call4agents` is not the Call4Agents core (PyPI has an "
        "unrelated project of that name): pip uninstall call4agents, then "
        f'pip install "call4agents-core[{extra}]"'
    )
