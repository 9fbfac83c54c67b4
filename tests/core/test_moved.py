"""Module paths from before the layers still import for one release, as the same modules."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

from call4agents import _moved


def _fresh(code: str) -> str:
    """What ``code`` prints in a fresh interpreter (in this one, paths may be bound already)."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize("old", sorted(_moved.MOVED))
def test_an_old_module_path_imports_the_moved_module_with_a_warning(old: str) -> None:
    code = (
        "import importlib, warnings\n"
        "warnings.simplefilter('error')\n"
        "try:\n"
        f"    importlib.import_module('call4agents.{old}')\n"
        "except DeprecationWarning as w:\n"
        "    print(w)\n"
    )
    assert f"call4agents.{old} moved to call4agents.{_moved.MOVED[old]}" in _fresh(code)


def test_names_import_from_old_paths_and_the_functions_keep_their_names(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import call4agents as c4a

    for old in ("call4agents.store", "call4agents.effect"):  # as if never imported here
        monkeypatch.delitem(sys.modules, old, raising=False)
    with pytest.warns(DeprecationWarning, match="call4agents.store moved to"):
        from call4agents.store import Store  # noqa: F401  (the old spelling)
    with pytest.warns(DeprecationWarning, match="call4agents.effect moved to"):
        old = importlib.import_module("call4agents.effect")
    assert old is importlib.import_module("call4agents.engine.effect")
    # The old module called "effect" does not hide the decorator of the same name.
    assert callable(c4a.effect)
    assert c4a.effect is importlib.import_module("call4agents.engine.effect").effect


def test_an_unknown_old_path_is_still_an_import_error() -> None:
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("call4agents.no_such_module")


def test_an_old_path_leaves_the_module_its_own_spec() -> None:
    """Importing by the old path once set the module's __spec__ to the alias's: its relative
    imports then resolved against the old package (Python 3.12 warned, later versions will
    import the wrong module)."""
    code = (
        "import importlib, warnings\n"
        "warnings.simplefilter('ignore')\n"
        f"for old in {sorted(_moved.MOVED)!r}:\n"
        "    module = importlib.import_module('call4agents.' + old)\n"
        "    print(module.__spec__.name, module.__spec__.parent, module.__package__)\n"
    )
    for old, line in zip(sorted(_moved.MOVED), _fresh(code).splitlines(), strict=True):
        module = importlib.import_module(f"call4agents.{_moved.MOVED[old]}")
        assert line.split() == [module.__name__, module.__spec__.parent, module.__package__]
