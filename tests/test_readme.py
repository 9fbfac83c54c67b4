"""The README stays honest: every Python snippet in it runs, and its commands exist."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
DOCS = [ROOT / "README.md", *sorted(ROOT.glob("packages/*/README.md"))]
# Every snippet of the main README runs. The package READMEs are references with fragments; their
# complete examples are the files in examples/, which the tests run.
SNIPPETS = [
    (f"README.md#{i}", code)
    for i, code in enumerate(re.findall(r"```python\n(.*?)```", README, flags=re.DOTALL))
]


@pytest.mark.parametrize(("where", "code"), SNIPPETS, ids=[w for w, _ in SNIPPETS])
def test_python_snippet_runs(where: str, code: str, tmp_path: Path) -> None:
    script = tmp_path / "snippet.py"  # run as a user would: a script file
    script.write_text(code, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, f"{where}:\n{code}\n{done.stderr}"


def test_shell_commands_exist() -> None:
    for script in re.findall(r"bash (scripts/\w+)", README):
        assert (ROOT / script).exists(), script
    for doc in DOCS:  # PyPI's `call4agents` is another project: never tell anyone to fetch it
        text = doc.read_text()
        assert not re.search(r"pip install \"?call4agents(?!-)", text), doc
        for folder in re.findall(r"pip install [^\n]*?\./(packages/\w+)", text):
            assert (ROOT / folder / "pyproject.toml").exists(), folder
    ci = (ROOT / ".ci" / "run").read_text()
    assert "exec bash scripts/test" in ci  # CI runs exactly the README's test command


def test_every_cli_command_is_documented() -> None:
    from call4agents.cli import build_parser

    parser = build_parser()
    commands = next(a for a in parser._actions if a.dest == "command").choices  # type: ignore[union-attr]
    for name in commands:
        assert f"call4agents {name}" in README or f"`{name} TICKET`" in README, name
