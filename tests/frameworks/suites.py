"""Fetching, unpacking and running a framework's own tests, bare and with OnceOnly.

A framework's pinned release comes from the package index as its sdist (fetched by pip from
the index pip is set up to use, checked against a pinned sha256) and its ``tests/`` folder is
unpacked once into ``framework-suites/`` inside the environment, never into this repository.
Each run is a pytest of its own in a child process, rooted in that folder with the framework's
own settings, so this repository's pytest configuration and plugins do not apply to it.

Which sdists ship their tests: ``langchain``, ``openai-agents`` and ``mcp`` do (each has a
``test_*_suite.py`` here); ``pydantic-ai-slim``'s does not (its tests live only in its
repository), so Pydantic AI has no suite here.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import subprocess
import sys
import tarfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

PLUGIN_DIR = Path(__file__).parent


@dataclass(frozen=True)
class Release:
    """A framework's pinned release whose sdist ships its tests."""

    project: str  # the name pip knows it by
    version: str
    sha256: str  # of the sdist
    folder: str  # the sdist's top folder, e.g. "langchain-1.5.2"
    ini: str  # pytest.ini for the unpacked suite: the framework's own settings that matter


def unavailable(reason: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI=true but a framework's own tests cannot be fetched: {reason}")
    pytest.skip(reason)


def check_installed(release: Release, installed: str) -> None:
    assert installed == release.version, (
        f"{release.project} {installed} is installed; pin its tests in tests/frameworks (version "
        "and sha256) to the same release"
    )


def unpacked(release: Release) -> Path:
    """The release's tests, unpacked once into the environment's cache."""
    root = Path(sys.prefix) / "framework-suites" / release.folder
    whole = root / ".unpacked"
    if not whole.exists():
        _unpack(release, root)
        whole.touch()  # last: its presence says the folder is whole
    # Written each time, so a change of settings here reaches a cache unpacked before it.
    (root / "pytest.ini").write_text(release.ini, encoding="utf-8")
    return root


def _unpack(release: Release, root: Path) -> None:
    data = _download_sdist(release, root.parent)
    if hashlib.sha256(data).hexdigest() != release.sha256:
        pytest.fail(f"{release.project} {release.version}'s sdist does not match its sha256")
    prefix = f"{release.folder}/"
    with tarfile.open(fileobj=io.BytesIO(data)) as sdist:
        wanted = [m for m in sdist.getmembers() if m.name.startswith(prefix + "tests/")]
        for member in wanted:
            member.name = member.name[len(prefix) :]
        sdist.extractall(root, members=wanted, filter="data")


def _download_sdist(release: Release, folder: Path) -> bytes:
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
            f"{release.project}=={release.version}",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    sdist = folder / f"{release.folder}.tar.gz"
    if fetched.returncode != 0 or not sdist.exists():
        unavailable(
            f"pip could not fetch {release.project} {release.version}'s sdist: "
            f"{fetched.stderr[-500:]}"
        )
    return sdist.read_bytes()


def passed(
    root: Path,
    files: Sequence[str],
    *,
    plugin: str | None,
    options: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    some: bool = True,
) -> set[str]:
    """The node ids of the tests in ``files`` (files or node ids) that pass, with ``plugin``
    loaded if named; ``some``: at least one must pass (not an import error)."""
    # Tracebacks as one line each: only the PASSED lines are read, and a long traceback parses
    # the whole source file of every frame it shows (seconds per failure in a framework's
    # thousands-of-lines test files, where a suite switched on fails its named differences).
    pytest_args = ["-p", "no:cacheprovider", "-q", "-rA", "--tb=line", "-n", "0", *options]
    loaded = ["-p", plugin] if plugin else []
    child_env = dict(os.environ, PYTHONPATH=str(PLUGIN_DIR), **(env or {}))
    child_env.pop("CALL4AGENTS_URL", None)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", *pytest_args, *loaded, *files],
        cwd=root,
        env=child_env,
        capture_output=True,
        text=True,
        check=False,
    )
    found = set(re.findall(r"^PASSED (\S+)", done.stdout, flags=re.MULTILINE))
    assert found or not some, done.stdout[-3000:] + done.stderr[-3000:]
    return found


def second_look(
    root: Path, bare: set[str], switched_on: set[str], expected: Mapping[str, str], plugin: str
) -> set[str]:
    """``switched_on`` with the unexpected differences run once more, switched on: a framework's
    own timing tests (parallel calls, cancellation) sometimes fail on a busy machine whatever the
    plugin, and one that passes on its second run is no difference."""
    named = set(expected)
    again = sorted(t for t in bare - switched_on if t not in named and t.split("[")[0] not in named)
    if not again:
        return switched_on
    return switched_on | passed(root, again, plugin=plugin, some=False)


def assert_same_outcomes(
    bare: set[str],
    switched_on: set[str],
    expected: Mapping[str, str],
    *,
    at_least: int,
    unsteady: Mapping[str, str] | None = None,
) -> None:
    """Every test passing bare passes switched on, except ``expected``, each still a difference.

    A key of ``expected`` (or ``unsteady``) names one test, or a test function without its
    ``[parameters]`` for all of them. ``unsteady`` tests differ on some runs and not others
    (timing inside the framework's own test), so neither check counts them.
    """
    assert len(bare) > at_least, f"only {len(bare)} passed bare"  # not an import error's handful
    skipped = set(unsteady or {})
    lost = {t for t in bare - switched_on if t not in skipped and t.split("[")[0] not in skipped}
    differ = sorted(t for t in lost if t not in expected and t.split("[")[0] not in expected)
    assert differ == [], f"{len(differ)} pass bare and fail switched on: {differ}"
    # Each named difference is still one: a fix shows here, and its entry goes.
    found = {t for t in lost} | {t.split("[")[0] for t in lost}
    gone = sorted(t for t in expected if t not in found)
    assert gone == [], f"named as differences but no longer one: {gone}"
