"""LangChain's own agent tests, run bare and again with OnceOnly switched on.

The tests come from the pinned release's sdist on the package index (it ships them), fetched by
pip at test time and unpacked into a cache inside the environment, never into this repository.
The chosen files are LangChain's middleware and tool-calling tests that run offline with its own
fake model. The second run loads
``once_only_plugin``: ``OnceOnly()`` joins every ``create_agent`` middleware list, each test on a
fresh SQLite ledger. Every test that passes bare must pass switched on, except the named
differences below, each with its reason (and each must still be one, so the list stays short).
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

pytest.importorskip("langchain", reason="LangChain is not installed on this Python")

VERSION = "1.5.2"
SHA256 = "63816aee7f55503db5c4f266a0874047d417957ae70cbf27397325c584982c52"
AGENTS = "tests/unit_tests/agents"
FILES = [
    f"{AGENTS}/middleware/core/test_wrap_tool_call.py",
    f"{AGENTS}/middleware/core/test_tools.py",
    f"{AGENTS}/middleware/core/test_dynamic_tools.py",
    f"{AGENTS}/middleware/implementations/test_tool_call_limit.py",
    f"{AGENTS}/middleware/implementations/test_tool_error.py",
    f"{AGENTS}/middleware/implementations/test_human_in_the_loop.py",
    f"{AGENTS}/test_invalid_tool_calls.py",
]
EXPECTED = {
    f"{AGENTS}/middleware/core/test_tools.py::test_unknown_tool_raises_error": (
        "LangChain checks tools a middleware adds in wrap_model_call only while no middleware "
        "wraps tool calls; OnceOnly does, so the model gets the ToolNode's own 'not a valid "
        "tool' error instead (docs/langgraph.md)"
    ),
}
PLUGIN_DIR = Path(__file__).parent


def _unavailable(reason: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI=true but LangChain's own tests cannot be fetched: {reason}")
    pytest.skip(reason)


def _suite() -> Path:
    """The release's tests, unpacked once into the environment's cache."""
    root = Path(sys.prefix) / "framework-suites" / f"langchain-{VERSION}"
    if (root / "pytest.ini").exists():
        return root
    data = _download_sdist(root.parent)
    if hashlib.sha256(data).hexdigest() != SHA256:
        pytest.fail(f"langchain {VERSION}'s sdist does not match its pinned sha256")
    prefix = f"langchain-{VERSION}/"
    with tarfile.open(fileobj=io.BytesIO(data)) as sdist:
        wanted = [m for m in sdist.getmembers() if m.name.startswith(prefix + "tests/")]
        for member in wanted:
            member.name = member.name[len(prefix) :]
        sdist.extractall(root, members=wanted, filter="data")
    # Its own rootdir and config, so this repository's pytest settings do not apply to it.
    (root / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    return root


def _download_sdist(folder: Path) -> bytes:
    """The release's sdist, fetched by pip from the index pip is set up to use."""
    folder.mkdir(parents=True, exist_ok=True)
    fetched = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--no-binary",
            ":all:",
            "--disable-pip-version-check",
            "--dest",
            str(folder),
            f"langchain=={VERSION}",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    sdist = folder / f"langchain-{VERSION}.tar.gz"
    if fetched.returncode != 0 or not sdist.exists():
        _unavailable(f"pip could not fetch langchain {VERSION}'s sdist: {fetched.stderr[-500:]}")
    return sdist.read_bytes()


def _passed(root: Path, *, once_only: bool) -> set[str]:
    pytest_args = ["-p", "no:cacheprovider", "--noconftest", "-q", "-rA", "-n", "0"]
    plugin = ["-p", "once_only_plugin"] if once_only else []
    env = dict(os.environ, PYTHONPATH=str(PLUGIN_DIR))
    env.pop("CALL4AGENTS_URL", None)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", *pytest_args, *plugin, *FILES],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    passed = set(re.findall(r"^PASSED (\S+)", done.stdout, flags=re.MULTILINE))
    assert passed, done.stdout[-3000:] + done.stderr[-3000:]
    return passed


def test_every_test_passing_bare_passes_with_once_only() -> None:
    import langchain

    assert langchain.__version__ == VERSION, (
        f"langchain {langchain.__version__} is installed; pin its tests here (VERSION and "
        "SHA256) to the same release"
    )
    root = _suite()
    bare = _passed(root, once_only=False)
    switched_on = _passed(root, once_only=True)
    assert len(bare) > 100  # the chosen files ran, not an import error's handful
    assert sorted(bare - switched_on - set(EXPECTED)) == []
    # Each named difference is still one: a fix shows here, and its entry goes.
    assert sorted(t for t in EXPECTED if t not in bare or t in switched_on) == []
