"""This interpreter as a Windows Python sees the core: POSIX's names gone before it is imported.

``python -m tests.core.posixless pytest ARGS`` runs pytest; ``python -m tests.core.posixless
imports MODULE...`` imports each module and prints its name. Either way the names a Windows
Python lacks are deleted first (fork hooks, fork, user ids, O_NOFOLLOW, SIGKILL; ``fcntl`` cannot
be imported), so any use of them at import or at run time fails as it would there.

Third-party packages are imported before: on Linux they take their own POSIX branches (pytest's
temporary folders, platformdirs read the user id), which on Windows take theirs. Only our code
is under test. Run from the repository's root.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import signal
import sys

import pytest

OS_NAMES = ("register_at_fork", "fork", "geteuid", "getuid", "O_NOFOLLOW")
CORE_NEEDS = ("sqlalchemy", "sqlalchemy.dialects.sqlite", "hypothesis")
FRAMEWORKS = (
    "langgraph.prebuilt",
    "langgraph.checkpoint.sqlite",
    "pydantic_ai",
    "agents",
    "mcp.server",
)


def strip(third_party: tuple[str, ...] = CORE_NEEDS) -> None:
    """Delete what a Windows Python does not have, after importing ``third_party`` (those
    installed); refuse if any of our code is loaded."""
    ours = sorted(m for m in sys.modules if m.split(".")[0].startswith("call4agents"))
    assert not ours, f"loaded before the names were removed: {ours}"
    for module in third_party:
        if importlib.util.find_spec(module.split(".")[0]) is not None:
            importlib.import_module(module)
    for name in OS_NAMES:
        vars(os).pop(name, None)
    vars(signal).pop("SIGKILL", None)
    sys.modules["fcntl"] = None  # type: ignore[assignment]  # `import fcntl` now fails
    os.environ.setdefault("USER", "posixless")  # getpass reads USERNAME on Windows
    assert not hasattr(os, "register_at_fork")
    assert not hasattr(signal, "SIGKILL")


class _StripFirst:
    @pytest.hookimpl(tryfirst=True)
    def pytest_load_initial_conftests(self) -> None:
        strip()  # after pytest's plugins, before tests/conftest.py imports call4agents


def main(argv: list[str]) -> int:
    what, *rest = argv
    if what == "pytest":
        return int(pytest.main(rest, plugins=[_StripFirst()]))
    strip(CORE_NEEDS + FRAMEWORKS)
    for module in rest:
        importlib.import_module(module)
        print(module)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
