"""What every command shares: the lazily loaded ledger modules, output helpers, opening a ledger."""

from __future__ import annotations

import argparse
import datetime as dt
import importlib
import importlib.util
import json
import os
import re
import sys
import types
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from call4agents.model.errors import ConfigurationError, LedgerError

# SQLAlchemy and the ledger's modules load when a command first needs them: `--help`, `--version`
# and a usage error need none of them.
if TYPE_CHECKING:
    from call4agents.engine import run_notes as run_notes
    from call4agents.facade.ledger import Ledger
    from call4agents.storage import _db as _db
    from call4agents.storage import diagnose as diagnose
    from call4agents.storage import migrations as migrations
    from call4agents.storage import urls as urls


def _lazy_module(name: str) -> types.ModuleType:
    """The module, loaded at its first attribute access (or at once if already loaded)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec(name)
    assert spec is not None, name
    assert spec.loader is not None, name
    spec.loader = importlib.util.LazyLoader(spec.loader)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


if not TYPE_CHECKING:
    _db = _lazy_module("call4agents.storage._db")
    migrations = _lazy_module("call4agents.storage.migrations")
    diagnose = _lazy_module("call4agents.storage.diagnose")
    run_notes = _lazy_module("call4agents.engine.run_notes")
    urls = _lazy_module("call4agents.storage.urls")

PROG = "call4agents"
EXIT_OK, EXIT_FAILED, EXIT_ERROR, EXIT_IN_DOUBT = 0, 1, 2, 3
CLOCK_SKEW_WARN = 5.0
CONSOLE_PORT = 8470  # fixed, so a bookmark keeps working
_AGE = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([smhdw]?)\s*", re.IGNORECASE)
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


class UsageError(Exception):
    """A command line that cannot be run as written (reported like any other error)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


# -- output helpers -------------------------------------------------------------------------


def _table(
    headers: Sequence[str], rows: Sequence[Sequence[str]], below: dict[int, list[str]] | None = None
) -> str:
    """Left-aligned columns, two spaces apart; ``below[i]`` are extra lines under row ``i``."""
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(cell.ljust(w) for cell, w in zip(cells, widths, strict=True)).rstrip()

    lines = [line(headers)]
    for i, row in enumerate(rows):
        lines.append(line(row))
        lines.extend("    " + extra for extra in (below or {}).get(i, []))
    return "\n".join(lines)


def _trim(value: str | None, width: int) -> str:
    if not value:
        return ""
    flat = " ".join(value.split())
    return flat if len(flat) <= width else flat[: width - 3] + "..."


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)


def _print_json(value: Any) -> None:
    print(json.dumps(_iso_times(value), indent=2, ensure_ascii=False, default=str))


def _iso_times(value: Any, key: str = "") -> Any:
    """Timestamps (``*_at`` fields, epoch seconds inside the ledger) as ISO 8601 in UTC."""
    if isinstance(value, dict):
        return {k: _iso_times(v, str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [_iso_times(v) for v in value]
    is_time = key == "at" or key.endswith("_at")
    if is_time and isinstance(value, int | float) and not isinstance(value, bool):
        return dt.datetime.fromtimestamp(value, tz=dt.timezone.utc).isoformat()
    return value


def parse_age(text_: str) -> float:
    """``30d``, ``12h``, ``15m``, ``45s``, ``2w`` or plain seconds, as seconds."""
    if text_.strip().startswith("-"):
        raise ConfigurationError(
            f"the age {text_!r} is negative: an age counts back from now, e.g. --older-than "
            f"{text_.strip()[1:]} for what finished more than {text_.strip()[1:]} ago"
        )
    found = _AGE.fullmatch(text_)
    if found is None:
        raise ConfigurationError(
            f"cannot read the age {text_!r}: give a number with a unit, like 30d, 12h, 15m or 45s "
            "(d = days, h = hours, m = minutes, s = seconds), or plain seconds"
        )
    return float(found.group(1)) * _UNITS[found.group(2).lower()]


def import_tools(module: str) -> None:
    """``--import MODULE``: import it (from the working folder too), so that its tools' undo=
    functions are registered."""
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        importlib.import_module(module)
    except ImportError as exc:
        raise ConfigurationError(f"--import {module}: cannot import it ({exc})") from exc


# -- opening the ledger ---------------------------------------------------------------------


def _url(args: argparse.Namespace) -> _db.URL:
    return urls.parse_url(getattr(args, "url", None))


def _schema(args: argparse.Namespace) -> str | None:
    schema: str | None = getattr(args, "schema", None)
    return schema or None


def _sqlite_path(url: _db.URL) -> Path | None:
    if url.get_backend_name() != "sqlite":
        return None
    return Path(url.database or "").expanduser()


def _require_existing(url: _db.URL) -> None:
    """Reading commands must not create an empty ledger where a URL has a typo."""
    path = _sqlite_path(url)
    if path is not None and url.database not in (None, "", ":memory:") and not path.exists():
        raise LedgerError(
            f"there is no ledger at {urls.safe_url(url)}: the file {path} does not exist. Check "
            "--url (or $CALL4AGENTS_URL); agents create the ledger when they first run"
        )


def _open(args: argparse.Namespace) -> Ledger:
    from call4agents.facade.ledger import Ledger

    url = _url(args)
    _require_existing(url)
    # Never change the schema from a reading command: an old ledger asks for `migrate`. A
    # person (or the next cron run) asks again: no waiting out an outage here.
    return Ledger(
        url.render_as_string(hide_password=False),
        schema=_schema(args),
        auto_migrate=False,
        open_retry=0,
    )


def _engine(url: _db.URL, schema: str | None) -> _db.Engine:
    return _db.make_engine(url, durability="power", schema=schema, busy_timeout=30.0)
