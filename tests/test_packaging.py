"""What a user installs: names no resolver can confuse with PyPI's unrelated `call4agents`."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path
from typing import Any

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pytest brings tomli on 3.10
    import tomli as tomllib

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


# -- the built artifacts -----------------------------------------------------------------------

INTEGRATIONS = {
    "call4agents-langgraph": "call4agents_langgraph",
    "call4agents-pydantic-ai": "call4agents_pydantic_ai",
    "call4agents-openai-agents": "call4agents_openai_agents",
    "call4agents-mcp": "call4agents_mcp",
}


def _uv() -> list[str]:
    """The uv that scripts/uv.sh set up: on PATH, in ./.tools, or as a module."""
    found = shutil.which("uv") or shutil.which("uv", path=str(ROOT / ".tools" / "bin"))
    return [found] if found else [sys.executable, "-m", "uv"]


def _run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}  # ours is not the target
    return subprocess.run(
        [*_uv(), *args], cwd=ROOT, env=env, input=stdin, capture_output=True, text=True,
        timeout=240, check=False,
    )  # fmt: skip


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every package's wheel and sdist, built once for this module."""
    out = tmp_path_factory.mktemp("dist")
    done = _run("build", "--all-packages", "--quiet", "--out-dir", str(out))
    assert done.returncode == 0, done.stderr
    return out


def test_every_artifact_carries_the_license_and_a_real_readme(dist: Path) -> None:
    wheels, sdists = sorted(dist.glob("*.whl")), sorted(dist.glob("*.tar.gz"))
    assert len(wheels) == len(sdists) == len(PYPROJECTS)
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as zf:
            names = zf.namelist()
            [meta] = [n for n in names if n.endswith(".dist-info/METADATA")]
            text = zf.read(meta).decode()
        assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names), wheel
        assert "License-Expression: Apache-2.0" in text
        assert "Classifier: Typing :: Typed" in text
        assert "Keywords: " in text
        assert "Requires-Python: >=3." in text
        description = text.split("\n\n", 1)[1]
        assert len(description.splitlines()) > 20, wheel
        assert "\\n" not in description, wheel
        assert "../../" not in description, wheel  # relative links break on a package index
    for sdist in sdists:
        with tarfile.open(sdist) as tf:
            files = {Path(n).name for n in tf.getnames()}
        assert {"LICENSE", "README.md", "PKG-INFO"} <= files, sdist


def test_the_core_wheel_carries_the_consoles_templates_and_they_render_from_it(
    dist: Path, tmp_path: Path
) -> None:
    """The console's pages come from templates read as package data: the wheel holds each one
    (and the static files), the console extra brings their engine, and a page renders from
    the installed files, not from this checkout."""
    console = ROOT / "packages/core/src/call4agents/console"
    files = [*console.glob("templates/*.html"), *console.glob("static/*")]
    assert len(files) > 10
    [wheel] = dist.glob("call4agents_core-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        [meta] = [n for n in names if n.endswith(".dist-info/METADATA")]
        text = zf.read(meta).decode()
        zf.extractall(tmp_path / "site")
    for path in files:
        assert path.relative_to(console.parents[1]).as_posix() in names, path
    assert "Requires-Dist: jinja2>=3.1; extra == 'console'" in text
    render = (
        "import call4agents.console._render as r; print(r.__file__); "
        "print(sorted(r.ENV.list_templates())); "
        "print(r.render('error.html', title='T', message='<b>', user=None, role='', live=False, "
        "here=''))"
    )
    done = subprocess.run(
        [sys.executable, "-c", render],
        env={**os.environ, "PYTHONPATH": str(tmp_path / "site")},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    where, listed, page = done.stdout.split("\n", 2)
    assert where.startswith(str(tmp_path / "site"))
    assert listed == repr(sorted(p.name for p in console.glob("templates/*.html")))
    assert '<p class="error" role="alert">&lt;b&gt;</p>' in page


def test_twine_check_passes_on_every_artifact(dist: Path) -> None:
    artifacts = sorted(str(p) for p in [*dist.glob("*.whl"), *dist.glob("*.tar.gz")])
    done = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", *artifacts],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("PASSED") == len(artifacts)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(INTEGRATIONS))
def test_an_integration_installs_our_core_and_never_pypis_call4agents(
    name: str, dist: Path, tmp_path: Path
) -> None:
    """A resolver that sees our wheels and every name on PyPI picks `call4agents-core` from ours."""
    venv = tmp_path / "venv"
    assert _run("venv", "--quiet", str(venv)).returncode == 0
    python = str(venv / "bin" / "python")
    done = _run("pip", "install", "--python", python, "--find-links", str(dist), name)
    assert done.returncode == 0, done.stderr
    listed = _run("pip", "list", "--python", python, "--format", "json")
    installed = {d["name"]: d["version"] for d in json.loads(listed.stdout)}
    assert "call4agents" not in installed, installed  # the unrelated project on PyPI
    assert installed[CORE] == installed[name] == "0.1.0.dev0"
    imported = subprocess.run(
        [python, "-c", f"import {INTEGRATIONS[name]}"], capture_output=True, text=True, check=False
    )
    assert imported.returncode == 0, imported.stderr


def _resolve(requirement: str, python_version: str, dist: Path) -> subprocess.CompletedProcess[str]:
    """What a resolver for that Python picks from our wheels and PyPI, without installing."""
    return _run(
        "pip", "compile", "--quiet", "--no-header", "--python-version", python_version,
        "--find-links", str(dist), "-", stdin=requirement,
    )  # fmt: skip


@pytest.mark.parametrize("name", ["call4agents-langgraph", "call4agents-pydantic-ai"])
def test_an_integration_refuses_at_install_time_a_python_its_framework_does_not_support(
    name: str, dist: Path
) -> None:
    done = _resolve(name, "3.10", dist)
    assert done.returncode != 0
    assert f"{name}==0.1.0.dev0 requires Python >=3.11" in " ".join(done.stderr.split())


def test_without_our_core_wheel_an_integration_does_not_resolve_at_all(
    dist: Path, tmp_path: Path
) -> None:
    """PyPI's `call4agents` can never stand in for the core: the integrations do not name it."""
    for wheel in dist.glob("call4agents_mcp-*.whl"):
        shutil.copy(wheel, tmp_path)
    done = _resolve("call4agents-mcp", "3.11", tmp_path)
    assert done.returncode != 0
    assert CORE in done.stderr
    assert "call4agents==" not in done.stdout


def test_the_core_and_its_all_extra_install_on_python_3_10(dist: Path) -> None:
    done = _resolve(f"{CORE}[all]", "3.10", dist)
    assert done.returncode == 0, done.stderr
    assert f"{CORE}==0.1.0.dev0" in done.stdout
    assert "call4agents-mcp==" in done.stdout
    assert "call4agents-langgraph" not in done.stdout  # LangChain 1.5 needs 3.11


# The Pythons the tests run on: `bash scripts/test` runs the suite on 3.11, scripts/pythons on the
# others (a subset each; `bash scripts/test --all-pythons` the whole suite on each).
TESTED = ("3.10", "3.11", "3.12", "3.13")


def test_each_package_states_exactly_the_pythons_its_tests_run_on() -> None:
    others = re.search(
        r"^for version in ([\d. ]+); do$", (ROOT / "scripts/pythons").read_text(), re.M
    )
    assert others, "scripts/pythons names the other Pythons in its loop"
    assert sorted({"3.11", *others[1].split()}) == sorted(TESTED)
    for path in PYPROJECTS:
        project = _project(path)
        oldest = project["requires-python"].removeprefix(">=")
        stated = [
            c.rsplit(" :: ", 1)[1]
            for c in project["classifiers"]
            if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)
        ]
        assert stated == list(TESTED[TESTED.index(oldest) :]), path


# The operating systems the GitHub Actions workflow runs the tests on, as each package names them.
SYSTEMS = {
    "ubuntu-latest": "Operating System :: POSIX :: Linux",
    "macos-latest": "Operating System :: MacOS",
    "windows-latest": "Operating System :: Microsoft :: Windows",
}


def test_each_package_names_exactly_the_systems_its_tests_run_on() -> None:
    workflow = (ROOT / ".github/workflows/tests.yml").read_text(encoding="utf-8")
    matrix = re.search(r"^ +os: \[([^\]]+)\]$", workflow, re.M)
    pythons = re.search(r"^ +python: \[([^\]]+)\]$", workflow, re.M)
    assert matrix, "the workflow names its systems in one `os: [...]` line"
    assert pythons, "the workflow names its Pythons in one `python: [...]` line"
    assert [v.strip(' "') for v in pythons[1].split(",")] == list(TESTED)
    systems = sorted(SYSTEMS[name.strip()] for name in matrix[1].split(","))
    for path in PYPROJECTS:
        stated = [c for c in _project(path)["classifiers"] if c.startswith("Operating System ::")]
        assert stated == systems, path


def test_langgraph_checkpoint_sqlite_is_only_an_extra(dist: Path) -> None:
    done = _resolve("call4agents-langgraph", "3.11", dist)
    assert done.returncode == 0, done.stderr
    assert "langgraph-checkpoint-sqlite" not in done.stdout
    assert "sqlite-vec" not in done.stdout


def test_every_package_ships_the_repository_license_and_a_changelog_exists() -> None:
    license_text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in license_text
    assert "Version 2.0" in license_text
    for path in PYPROJECTS:
        assert (path.parent / "LICENSE").read_text(encoding="utf-8") == license_text, path
        assert _project(path)["license"] == "Apache-2.0"
    assert "0.1.0.dev0" in (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")


def test_the_core_readme_snippet_runs(tmp_path: Path) -> None:
    readme = (ROOT / "packages/core/README.md").read_text(encoding="utf-8")
    [code] = re.findall(r"```python\n(.*?)```", readme, flags=re.DOTALL)
    (tmp_path / "snippet.py").write_text(code, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "snippet.py"], cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr


def _slug(heading: str) -> str:
    """The anchor a Markdown renderer (GitHub's) gives a heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_the_readme_contents_link_every_section() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    contents = readme.split("**Contents:**", 1)[1].split("\n\n", 1)[0]
    anchors = re.findall(r"\]\(#([^)]+)\)", contents)
    headings = re.findall(r"^#{2,3} (.+)$", readme, flags=re.MULTILINE)
    slugs = {_slug(h) for h in headings}
    assert set(anchors) <= slugs, set(anchors) - slugs
    sections = {_slug(h) for h in re.findall(r"^## (.+)$", readme, flags=re.MULTILINE)}
    assert sections <= set(anchors), sections - set(anchors)
    assert readme.index("**Contents:**") < readme.index("\n## ")  # at the top
