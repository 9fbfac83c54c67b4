"""Old import paths, kept for one release: ``call4agents.store`` and the like now live in layers.

Only ``call4agents`` and ``call4agents.integration`` are public. Before the core was split into
layers (model, storage, engine, controls, facade), its modules sat at the top of the package and
some users imported them by name; those names still import, as the same module objects, with a
``DeprecationWarning`` that says where the module went.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import sys
import types
import warnings
from collections.abc import Sequence
from typing import Any

MOVED: dict[str, str] = {
    "errors": "model.errors",
    "canonical": "model.canonical",
    "codec": "model.codec",
    "tables": "storage.tables",
    "migrations": "storage.migrations",
    "store": "storage.store",
    "effect": "engine.effect",
    "context": "engine.context",
    "approvals": "engine.approvals",
    "lookup": "engine.lookup",
    "run_notes": "engine.run_notes",
    "runs": "engine.runs",
    "undo": "controls.undo",
    "replay": "controls.replay",
    "observe": "engine.observe",
    "stats": "controls.stats",
    "ledger": "facade.ledger",
    "cli": "facade.cli",
    "quickstart": "facade.quickstart",
}


class _Alias:
    """Finds ``call4agents.<old>`` and hands back the module at its new path (a meta path
    finder and its loader; the protocols are plain methods, so importlib.abc is not loaded)."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        package, _, name = fullname.rpartition(".")
        if package != __package__ or name not in MOVED:
            return None
        loader: Any = self  # a Loader by its methods
        return importlib.machinery.ModuleSpec(fullname, loader)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        new = f"{__package__}.{MOVED[spec.name.rpartition('.')[2]]}"
        warnings.warn(
            f"{spec.name} moved to {new}; import from call4agents or call4agents.integration "
            "instead (the old path goes in the next release)",
            DeprecationWarning,
            stacklevel=2,
        )
        module = importlib.import_module(new)
        spec.loader_state = module.__spec__  # its own, which importing by this path replaces
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        """The module was loaded at its new path already. Importing it by the old one set its
        ``__spec__`` to the alias's, whose parent is not the module's package: put its own back,
        or its relative imports would resolve against the wrong package (Python 3.12 warns)."""
        assert module.__spec__ is not None
        module.__spec__ = module.__spec__.loader_state


def install() -> None:
    if not any(isinstance(finder, _Alias) for finder in sys.meta_path):
        sys.meta_path.append(_Alias())
