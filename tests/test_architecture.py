"""The shape of the code holds: the core is a stack of layers, integrations enter through one door.

- The core (``packages/core/src/call4agents``) is five layers, each a folder, each importing only
  the layers below it: model, storage, engine, controls, facade. The console sits beside the
  facade; the package's own ``__init__``, ``integration`` (the integrations' door) and the
  compatibility shims sit on top. Typing-only imports count: a type from a layer above is a
  dependency on it all the same.
- Only storage imports SQLAlchemy or a database driver: every statement the ledger runs is there.
- No import circle, at import time or inside functions, in the core or in any integration (in
  an integration, typing-only imports count too; in the core a type named within a layer is not
  an import at run time).
- An integration imports ``call4agents`` and ``call4agents.integration`` and nothing else of the
  core; the core imports no framework and names no integration package (a framework's result
  type is taught to it by the integration: ``register_tool_payload`` and an entry point). The
  quickstart is the exception by design: it runs a demo of each framework.
- No module grows past 800 lines.

A failure here means: move the code to the layer it belongs to, or export what an integration
needs from ``call4agents.integration``; do not widen the rules.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
CORE = ROOT / "packages" / "core" / "src" / "call4agents"
INTEGRATIONS = sorted(ROOT.glob("packages/*/src/call4agents_*"))
LAYERS = ("model", "storage", "engine", "controls", "facade")
BESIDE = {"console": "facade"}  # folders on a layer's level
TOP = {"call4agents", "call4agents.integration", "call4agents.__main__"}
DOORS = {"call4agents", "call4agents.integration"}
SQL = {"sqlalchemy", "psycopg", "psycopg2", "psycopg_pool", "sqlite3", "asyncpg"}
FRAMEWORKS = {"langchain", "langchain_core", "langgraph", "pydantic_ai", "agents", "mcp", "openai"}
FRAMEWORKS |= {"celery", "kombu", "dramatiq", "rq", "redis", "dbos", "temporalio"}  # job engines
NAMES_AN_INTEGRATION = re.compile(r"call4agents_(langgraph|mcp|pydantic_ai|openai_agents|jobs)")
DEMOS = {"quickstart.py"}  # the core's demo of every framework
MAX_LINES = 800


@dataclass(frozen=True)
class Import:
    target: str  # the module imported, or the module a name is imported from
    names: tuple[str, ...]  # the names of a ``from`` import
    typing_only: bool
    top_level: bool


def module_name(path: Path) -> str:
    src = next(p for p in path.parents if p.name == "src")
    parts = path.relative_to(src).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(source: str, module: str, is_package: bool) -> Iterator[Import]:
    """Every import of a source file: at the top, in functions, and under ``TYPE_CHECKING``."""
    package = module if is_package else module.rpartition(".")[0]

    def walk(node: ast.AST, typing_only: bool, top_level: bool) -> Iterator[Import]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                yield from walk(child, True, top_level)
                continue
            if isinstance(child, ast.Import):
                for alias in child.names:
                    yield Import(alias.name, (), typing_only, top_level)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    up = package.split(".")[: len(package.split(".")) - (child.level - 1)]
                    base = ".".join([*up, *([child.module] if child.module else [])])
                names = tuple(alias.name for alias in child.names)
                yield Import(base, names, typing_only, top_level)
            inner = isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            yield from walk(child, typing_only, top_level and not inner)

    yield from walk(ast.parse(source), False, True)


def modules_of(package: Path) -> dict[str, Path]:
    return {module_name(p): p for p in sorted(package.rglob("*.py"))}


def targets(found: Import, known: dict[str, Path]) -> list[str]:
    """The modules an import reaches: ``from pkg import mod`` reaches ``pkg.mod`` itself."""
    reached = [f"{found.target}.{n}" for n in found.names if f"{found.target}.{n}" in known]
    return reached or [found.target]


def layer_of(module: str) -> int | None:
    """A module's place in the stack; None above it (the package itself, the door, the shims)."""
    parts = module.split(".")
    if module in TOP or len(parts) < 2:
        return None
    folder = BESIDE.get(parts[1], parts[1])
    assert folder in LAYERS, f"{module} is in no layer: put it in one of {LAYERS}"
    return LAYERS.index(folder)


def upward_arrows(graph: dict[str, list[tuple[str, Import]]]) -> list[str]:
    found = []
    for module, edges in graph.items():
        mine = layer_of(module)
        for target, how in edges:
            if not target.startswith("call4agents.") or target == module:
                continue
            theirs = layer_of(target)
            if mine is not None and (theirs is None or theirs > mine):
                kind = " (typing only)" if how.typing_only else ""
                found.append(f"{module} -> {target}{kind}")
    return sorted(found)


def circles(graph: dict[str, list[tuple[str, Import]]]) -> list[list[str]]:
    """Groups of modules that import each other at run time (typing-only imports excluded)."""
    edges = {m: {t for t, how in e if t in graph and not how.typing_only} for m, e in graph.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(module: str) -> None:  # Tarjan's strongly connected components
        index[module] = low[module] = len(index)
        stack.append(module)
        for target in edges[module]:
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            group = []
            while (top := stack.pop()) != module:
                group.append(top)
            if group:
                found.append(sorted([module, *group]))

    for module in edges:
        if module not in index:
            visit(module)
    return found


def read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def graph_of(package: Path) -> dict[str, list[tuple[str, Import]]]:
    known = modules_of(package)
    return {
        module: [
            (target, found)
            for found in imports(
                path.read_text(encoding="utf-8"), module, path.name == "__init__.py"
            )
            for target in targets(found, known)
        ]
        for module, path in known.items()
    }


CORE_GRAPH = graph_of(CORE)


def test_each_layer_imports_only_the_layers_below_it() -> None:
    assert upward_arrows(CORE_GRAPH) == []


def test_only_storage_talks_to_the_database() -> None:
    offending = sorted(
        f"{module} imports {target}"
        for module, edges in CORE_GRAPH.items()
        for target, _ in edges
        if target.split(".")[0] in SQL and layer_of(module) != LAYERS.index("storage")
    )
    assert offending == [], "move the statement into call4agents.storage"


def test_no_import_circle_in_the_core() -> None:
    assert circles(CORE_GRAPH) == []


@pytest.mark.parametrize("package", INTEGRATIONS, ids=[p.name for p in INTEGRATIONS])
def test_no_import_circle_in_an_integration_not_even_for_typing(package: Path) -> None:
    """An integration's helper modules say what they need of the object that owns them with a
    Protocol, rather than importing its class back."""
    graph = {
        module: [(target, replace(how, typing_only=False)) for target, how in edges]
        for module, edges in graph_of(package).items()
    }
    assert circles(graph) == []


@pytest.mark.parametrize("package", INTEGRATIONS, ids=[p.name for p in INTEGRATIONS])
def test_an_integration_enters_the_core_through_its_door(package: Path) -> None:
    offending = {
        str(path.relative_to(ROOT)): bad
        for path in sorted(package.rglob("*.py"))
        if (bad := private_core_imports(path.read_text(encoding="utf-8")))
    }
    assert not offending, f"import these through call4agents.integration: {offending}"


def private_core_imports(source: str) -> list[str]:
    """Core modules imported other than through a door, ``from call4agents import _x`` included."""
    found = []
    for how in imports(source, "outside", False):
        if how.target.split(".")[0] != "call4agents":
            continue
        if how.target not in DOORS:
            found.append(how.target)
        elif how.target == "call4agents":
            found += [f"call4agents.{n}" for n in how.names if n.startswith("_")]
    return found


def framework_imports(source: str) -> list[str]:
    return [
        how.target
        for how in imports(source, "core", False)
        if how.target.split(".")[0] in FRAMEWORKS or how.target.startswith("call4agents_")
    ]


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


def test_no_module_is_too_long() -> None:
    long = {
        str(p.relative_to(ROOT)): n
        for package in [CORE, *INTEGRATIONS]
        for p in package.rglob("*.py")
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert long == {}, f"split these modules (at most {MAX_LINES} lines each)"


def test_the_checks_catch_what_they_guard() -> None:
    """The checks above are not vacuous: each finds a planted violation."""
    planted = "import call4agents.storage.store\n\ndef f():\n    from call4agents.engine import x\n"
    assert private_core_imports(planted) == ["call4agents.storage.store", "call4agents.engine"]
    assert private_core_imports("from call4agents import _children, run\n") == [
        "call4agents._children"
    ]
    assert private_core_imports("from call4agents.integration import Action\n") == []
    assert framework_imports("def f():\n    import langgraph.types\n") == ["langgraph.types"]
    assert NAMES_AN_INTEGRATION.search('"call4agents_mcp._payload:tool_payload"')
    up = Import("call4agents.controls.stats", (), typing_only=True, top_level=True)
    assert upward_arrows({"call4agents.engine.effect": [("call4agents.controls.stats", up)]})
    down = Import("call4agents.model.errors", (), typing_only=False, top_level=True)
    assert not upward_arrows({"call4agents.engine.effect": [("call4agents.model.errors", down)]})
    a_to_b = Import("b", (), typing_only=False, top_level=False)
    b_to_a = Import("a", (), typing_only=False, top_level=True)
    assert circles({"a": [("b", a_to_b)], "b": [("a", b_to_a)]}) == [["a", "b"]]
    typed = Import("a", (), typing_only=True, top_level=True)
    assert circles({"a": [("b", a_to_b)], "b": [("a", typed)]}) == []
    assert len(INTEGRATIONS) == 5
    assert (CORE / "integration.py").exists()
    assert len(CORE_GRAPH) > 40  # the walk found the core's modules
