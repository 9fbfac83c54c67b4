"""What a user installs: names no resolver can confuse with PyPI's unrelated `call4agents`."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import tomllib

ROOT = Path(__file__).parents[1]
CORE = "call4agents-core"  # PyPI's `call4agents` is an unrelated project
PYPROJECTS = sorted(ROOT.glob("packages/*/pyproject.toml"))


def _project(path: Path) -> dict[str, Any]:
    return tomllib.loads(path.read_text(encoding="utf-8"))["project"]


def test_every_requirement_names_the_core_by_its_distribution_name() -> None:
    for path in [ROOT / "pyproject.toml", *PYPROJECTS]:
        project = _project(path)
        extras: dict[str, list[str]] = project.get("optional-dependencies", {})
        reqs: list[str] = list(project.get("dependencies", []))
        reqs += [req for group in extras.values() for req in group]
        for req in reqs:
            assert not re.match(r"call4agents(?![-\w])", req), (path, req)
    assert _project(ROOT / "packages/core/pyproject.toml")["name"] == CORE


def test_install_hints_in_the_code_name_the_core_distribution() -> None:
    hints = []
    for source in ROOT.glob("packages/*/src/**/*.py"):
        hints += re.findall(r"pip install \"?(call4agents[^\s\"']*)", source.read_text("utf-8"))
    assert hints  # the hints exist, and each one names a distribution of this project
    assert all(h.startswith((f"{CORE}[", "call4agents-")) for h in hints), hints
