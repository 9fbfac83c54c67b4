"""The README and the docs stay honest: every Python snippet runs, their commands exist, the site
builds offline with every link resolved, and the CLI and API pages cover every public name.

A ```python block runs as a standalone script, unless it is marked as a fragment by a
`<!-- fragment -->` line right before it (then it is only compiled), or it only includes example
files with `--8<-- "path"` (then each file must exist and compile; tests/test_examples.py and its
siblings run them).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import NEEDS_PY311, OLD_PYTHON, needs_py311

ROOT = Path(__file__).parents[1]
MERMAID = ROOT / "scripts" / "mermaid" / "node_modules" / "mermaid" / "dist" / "mermaid.min.js"
README = (ROOT / "README.md").read_text(encoding="utf-8")
DOCS = ROOT / "docs"
# The pages whose snippets run: the README and the docs site. The package READMEs are references
# with fragments; their complete examples are the files in examples/, which the tests run.
PAGES = [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]
ALL_MARKDOWN = [*PAGES, *sorted(ROOT.glob("packages/*/README.md"))]
FRAGMENT = "<!-- fragment -->"
# A fence may be indented (inside a list item); its code is dedented before it runs.
BLOCK = re.compile(
    r"^(?P<marker><!-- fragment -->\n)?[ \t]*```python\n(?P<code>.*?)^[ \t]*```", re.M | re.S
)
INCLUDE = re.compile(r'^--8<-- "(?P<path>[^"]+)"$')


@dataclass(frozen=True)
class Snippet:
    where: str  # page#index, for the test id and the failure message
    kind: str  # "script", "fragment" or "include"
    code: str


def snippets_of(text: str, page: str) -> list[Snippet]:
    """Every ```python block of a Markdown page, with how the tests treat it."""
    found = []
    for i, block in enumerate(BLOCK.finditer(text)):
        code = textwrap.dedent(block["code"])
        lines = [line for line in code.splitlines() if line.strip()]
        if lines and all(INCLUDE.match(line) for line in lines):
            kind = "include"
        elif block["marker"]:
            kind = "fragment"
        else:
            kind = "script"
        found.append(Snippet(f"{page}#{i}", kind, code))
    return found


SNIPPETS = [
    s
    for page in PAGES
    for s in snippets_of(page.read_text(encoding="utf-8"), page.relative_to(ROOT).as_posix())
]


def _of_kind(kind: str) -> list[Snippet]:
    return [s for s in SNIPPETS if s.kind == kind]


@pytest.mark.parametrize("snippet", _of_kind("script"), ids=lambda s: s.where)
def test_python_snippet_runs(snippet: Snippet, tmp_path: Path) -> None:
    if OLD_PYTHON and needs_py311(snippet.code):
        pytest.skip(NEEDS_PY311)
    script = tmp_path / "snippet.py"  # run as a user would: a script file, in an empty folder
    script.write_text(snippet.code, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, f"{snippet.where}:\n{snippet.code}\n{done.stderr}"
    if snippet.where.startswith("README.md"):  # says what happened, in one line
        [line] = done.stdout.splitlines()
        assert re.search(r"emails sent: 1\b", line), line


def test_fragments_compile() -> None:
    for snippet in _of_kind("fragment"):
        compile(snippet.code, snippet.where, "exec")


def test_included_examples_exist_and_compile() -> None:
    included = [
        INCLUDE.match(line)["path"]  # type: ignore[index]
        for snippet in _of_kind("include")
        for line in snippet.code.splitlines()
        if line.strip()
    ]
    assert included, "the Examples page includes the files in examples/"
    for path in included:
        compile((ROOT / path).read_text(encoding="utf-8"), path, "exec")
    # Every example is on the Examples page, so the site shows all of them.
    examples = sorted(p.relative_to(ROOT).as_posix() for p in ROOT.glob("examples/*/*.py"))
    assert sorted(included) == examples


def test_snippet_kinds_are_told_apart() -> None:
    page = (
        "```python\nprint('runs')\n```\n\n"
        f"{FRAGMENT}\n```python\nsend_email(to)  # a fragment\n```\n\n"
        f"{FRAGMENT}\n\nText between: the marker no longer applies.\n\n```python\nx = 1\n```\n\n"
        '```python\n--8<-- "examples/plain_python/send_email.py"\n```\n\n'
        "1. In a list:\n\n    ```python\n    if True:\n        print('indented')\n    ```\n"
    )
    kinds = [s.kind for s in snippets_of(page, "page")]
    assert kinds == ["script", "fragment", "script", "include", "script"]
    compile(snippets_of(page, "page")[-1].code, "indented", "exec")  # dedented: it compiles


def test_shell_commands_exist() -> None:
    for page in PAGES:
        for script in re.findall(r"bash (scripts/\w+)", page.read_text(encoding="utf-8")):
            assert (ROOT / script).exists(), (page, script)
    # PyPI's `call4agents` is another project: never tell anyone to fetch it.
    for doc in ALL_MARKDOWN:
        text = doc.read_text()
        assert not re.search(r"pip install \"?call4agents(?!-)", text), doc
        for folder in re.findall(r"pip install [^\n]*?\./(packages/\w+)", text):
            assert (ROOT / folder / "pyproject.toml").exists(), folder
    ci = (ROOT / ".ci" / "run").read_text()
    assert "exec bash scripts/test" in ci  # CI runs exactly the README's test command


def test_commands_name_the_tools_where_the_quickstart_put_them() -> None:
    # After `bash scripts/quickstart` uv may be only in ./.tools/bin and call4agents, python and
    # mkdocs only in .venv/bin: a bare `uv run` fails in the reader's shell (the quickstart's own
    # printed commands are run by tests/test_quickstart.py).
    where = [*ALL_MARKDOWN, *ROOT.glob("examples/**/*.py"), *ROOT.glob("benchmarks/*.py")]
    for path in where:
        for line in path.read_text(encoding="utf-8").splitlines():
            assert not re.search(r"(^|[\s`])uv run ", line), (path, line)


def test_every_long_page_has_sections() -> None:
    # A page a reader must scroll gets a table of contents and anchors to link to.
    for page in sorted(DOCS.rglob("*.md")):
        text = page.read_text(encoding="utf-8")
        prose = re.sub(r"^```.*?^```", "", text, flags=re.MULTILINE | re.DOTALL)
        if len(prose.split()) > 300:
            assert re.search(r"^## ", prose, re.MULTILINE), f"{page.name}: no ## section"


def test_readme_links_to_docs_resolve() -> None:
    """The README's links are relative, so they work on GitHub; each must name a real file."""
    links = re.findall(r"\]\(((?:docs|examples|packages)/[^)#]+)(?:#[^)]*)?\)", README)
    assert any(link.startswith("docs/") for link in links)
    for link in links:
        assert (ROOT / link).exists(), link


def test_every_cli_command_is_documented() -> None:
    from call4agents.facade.cli import build_parser

    cli_page = (DOCS / "cli.md").read_text(encoding="utf-8")
    parser = build_parser()
    commands = next(a for a in parser._actions if a.dest == "command").choices  # type: ignore[union-attr]
    for name in commands:
        assert f"call4agents {name}" in cli_page or f"`{name} TICKET`" in cli_page, name


def test_every_public_name_is_in_the_api_reference() -> None:
    import call4agents

    reference = (DOCS / "reference" / "core.md").read_text(encoding="utf-8")
    documented = set(re.findall(r"^::: call4agents\.(?:\w+\.)*(\w+)$", reference, flags=re.M))
    assert set(call4agents.__all__) <= documented, set(call4agents.__all__) - documented


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The docs site, built once for this module with `mkdocs build --strict`."""
    if OLD_PYTHON:
        pytest.skip("MkDocs Material needs Python 3.11 (the docs build on 3.11)")
    tmp_path = tmp_path_factory.mktemp("docs")
    site = tmp_path / "site"
    # Offline: a plugin that tried to download something would meet a proxy that answers nothing.
    dead = "http://127.0.0.1:9"
    proxies = {k: dead for k in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY")}
    env = {**os.environ, **proxies, "no_proxy": "", "NO_PROXY": "", "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "--site-dir",
            str(site),
            "--config-file",
            str(ROOT / "mkdocs.yml"),
        ],
        cwd=tmp_path,  # paths in mkdocs.yml are the repository's, wherever the build runs from
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return site


@pytest.mark.slow
def test_docs_site_builds_strict_and_offline(site: Path) -> None:
    """`mkdocs build --strict`: every link and anchor resolves, every page is in the nav, every
    API name is found; the built pages carry the content (a page, the diagram, the reference)."""
    page = (site / "plain-python" / "index.html").read_text(encoding="utf-8")
    assert '<h1 id="once-only-actions-in-plain-python">Once-only actions in plain Python' in page
    assert '<pre class="mermaid"><code>stateDiagram-v2' in page  # the states diagram, as Mermaid
    assert "fonts.googleapis.com" not in page  # the theme asks no font service either
    reference = (site / "reference" / "core" / "index.html").read_text(encoding="utf-8")
    assert 'id="call4agents.engine.effect.effect"' in reference  # rendered from the docstrings
    assert ":class:" not in reference  # Sphinx roles shown as plain code (scripts/docs_hooks.py)
    assert 'id="call4agents_mcp.OnceOnly"' in (
        site / "reference" / "integrations" / "index.html"
    ).read_text(encoding="utf-8")
    examples = (site / "examples" / "index.html").read_text(encoding="utf-8")
    assert "--8&lt;--" not in examples  # the files are included, not the lines naming them
    assert "call4agents_langgraph" in examples


@pytest.mark.slow
def test_the_diagram_renders_offline_and_the_quickstart_sample_fits_at_1280px(site: Path) -> None:
    """In Chromium with every request off the site refused: Mermaid comes from the site and draws
    the diagram, and each row of the quickstart's sample shows whole at a laptop's width."""
    from tests.console.browser import chromium_path

    chromium = chromium_path()
    if not MERMAID.exists():
        problem = "Mermaid is not installed: npm ci --prefix scripts/mermaid (scripts/test does)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(problem, pytrace=False)
        pytest.skip(problem)
    from playwright.sync_api import Route, sync_playwright

    refused: list[str] = []

    def only_the_site(route: Route) -> None:
        if route.request.url.startswith("file:"):
            route.continue_()
        else:
            refused.append(route.request.url)
            route.abort()

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium)
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        page.route("**/*", only_the_site)
        page.goto((site / "plain-python" / "index.html").as_uri())
        # Material draws the diagram into a closed shadow root: it has a height once drawn.
        page.wait_for_function(
            "() => document.querySelector('div.mermaid')?.getBoundingClientRect().height > 50",
            timeout=120_000,
        )
        page.goto((site / "getting-started" / "index.html").as_uri())
        sample = page.locator(".wraps pre > code")
        assert "killed right after sending" in sample.inner_text()
        widths = sample.evaluate("code => [code.scrollWidth, code.clientWidth]")
        browser.close()
    assert widths[0] <= widths[1], widths  # nothing off to the side
    assert not [url for url in refused if "mermaid" in url], refused
