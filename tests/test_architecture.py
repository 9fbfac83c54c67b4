"""The package boundaries hold: integrations enter the core through one door, the core names no
framework.

An integration imports ``call4agents`` (the public API) and ``call4agents.integration`` (what
integrations build on) and nothing else of the core, so the core's modules can move without
breaking them. The core imports no framework and names no integration package: a framework's
result type is taught to it by the integration (``register_tool_payload`` and an entry point).
The quickstart is the exception by design: it runs a demo of each framework.
A failure here means: move the code, or export what is needed from ``call4agents.integration``.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
CORE = ROOT / "packages" / "core" / "src" / "call4agents"
INTEGRATIONS = sorted(ROOT.glob("packages/*/src/call4agents_*"))
DOORS = {"call4agents", "call4agents.integration"}
FRAMEWORKS = {"langchain", "langchain_core", "langgraph", "pydantic_ai", "agents", "mcp", "openai"}
NAMES_AN_INTEGRATION = re.compile(r"call4agents_(langgraph|mcp|pydantic_ai|openai_agents)")
DEMOS = {"quickstart.py"}  # the core's demo of every framework


def imported(source: str) -> list[str]:
    """Every absolute module a source file imports, at the top or inside a function."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append(node.module)
    return found


def private_core_imports(source: str) -> list[str]:
    return [m for m in imported(source) if m.split(".")[0] == "call4agents" and m not in DOORS]


def framework_imports(source: str) -> list[str]:
    return [
        m
        for m in imported(source)
        if m.split(".")[0] in FRAMEWORKS or m.split(".")[0].startswith("call4agents_")
    ]


@pytest.mark.parametrize("package", INTEGRATIONS, ids=[p.name for p in INTEGRATIONS])
def test_an_integration_enters_the_core_through_its_door(package: Path) -> None:
    offending = {
        str(path.relative_to(ROOT)): bad
        for path in sorted(package.rglob("*.py"))
        if (bad := private_core_imports(path.read_text(encoding="utf-8")))
    }
    assert not offending, f"import these through call4agents.integration: {offending}"


def test_the_core_imports_and_names_no_framework() -> None:
    offending: dict[str, list[str]] = {}
    for path in sorted(CORE.rglob("*.py")):
        if path.name in DEMOS:
            continue
        source = path.read_text(encoding="utf-8")
        bad = framework_imports(source) + NAMES_AN_INTEGRATION.findall(source)
        if bad:
            offending[str(path.relative_to(ROOT))] = bad
    assert not offending, offending


def test_the_checks_catch_what_they_guard() -> None:
    """The checks above are not vacuous: each finds a planted violation."""
    planted = "import call4agents.storage.store\n\ndef f():\n    from call4agents.engine.effect import Action\n"
    assert private_core_imports(planted) == [
        "call4agents.storage.store",
        "call4agents.engine.effect",
    ]
    assert private_core_imports("from call4agents.integration import Action\n") == []
    assert framework_imports("def f():\n    import langgraph.types\n") == ["langgraph.types"]
    assert NAMES_AN_INTEGRATION.search('"call4agents_mcp._payload:tool_payload"')
    assert len(INTEGRATIONS) == 4
    assert (CORE / "integration.py").exists()
