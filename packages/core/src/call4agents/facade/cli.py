"""The `call4agents` command: look into a ledger, settle actions in doubt, prune, migrate, check.

    call4agents doubt --fail-if-any          # cron / CI: exit 3 while anything is in doubt
    call4agents resolve 3f2a9c1b4d5e --happened --result '{"id": "msg-1"}' --by ann
    call4agents runs
    call4agents show ticket-1234
    call4agents gc --older-than 30d
    call4agents migrate
    call4agents doctor
    call4agents console                      # the operator console on http://127.0.0.1:8470

Every command takes ``--url`` (default ``$CALL4AGENTS_URL``, else ``sqlite:///.c4a/ledger.db``),
``--schema`` (PostgreSQL) and ``--json`` (one JSON document on stdout). Errors are one line on
stderr and exit code 2; passwords in URLs are never printed.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import datetime as dt
import getpass
import importlib
import importlib.util
import json
import os
import re
import secrets
import stat
import sys
import time
import types
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from call4agents.model.errors import Call4AgentsError, ConfigurationError, LedgerError

# SQLAlchemy and the ledger's modules load when a command first needs them: `--help`, `--version`
# and a usage error need none of them.
if TYPE_CHECKING:
    from sqlalchemy import Connection, Engine
    from sqlalchemy.engine import URL

    from call4agents.engine import run_notes
    from call4agents.engine.ledger import EffectRecord, RunSummary
    from call4agents.engine.runs import Handoff, RunStatus
    from call4agents.storage import _db, migrations

    from .ledger import Ledger


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


def _sqlalchemy_error() -> type[Exception]:
    """SQLAlchemy's base error, for an ``except`` clause (evaluated only when one is raised)."""
    from sqlalchemy.exc import SQLAlchemyError

    return SQLAlchemyError


def short_error(exc: BaseException) -> str:
    from call4agents.storage.store import short_error as first_line

    return first_line(exc)


if not TYPE_CHECKING:
    _db = _lazy_module("call4agents.storage._db")
    migrations = _lazy_module("call4agents.storage.migrations")
    run_notes = _lazy_module("call4agents.engine.run_notes")

PROG = "call4agents"
EXIT_OK, EXIT_FAILED, EXIT_ERROR, EXIT_IN_DOUBT = 0, 1, 2, 3
CLOCK_SKEW_WARN = 5.0
CONSOLE_PORT = 8470  # fixed, so a bookmark keeps working
STATE_WORDS = {
    "succeeded": "done",
    "failed": "failed",
    "in_doubt": "in doubt",
    "started": "running",
}
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


def _ago(then: float, now: float | None = None) -> str:
    seconds = (time.time() if now is None else now) - then
    if seconds < 1:
        return "just now"
    for size, unit in ((86400, "d"), (3600, "h"), (60, "m")):
        if seconds >= size:
            return f"{int(seconds // size)}{unit} ago"
    return f"{int(seconds)}s ago"


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


# -- opening the ledger ---------------------------------------------------------------------


def _url(args: argparse.Namespace) -> URL:
    return _db.parse_url(getattr(args, "url", None))


def _schema(args: argparse.Namespace) -> str | None:
    schema: str | None = getattr(args, "schema", None)
    return schema or None


def _sqlite_path(url: URL) -> Path | None:
    if url.get_backend_name() != "sqlite":
        return None
    return Path(url.database or "").expanduser()


def _require_existing(url: URL) -> None:
    """Reading commands must not create an empty ledger where a URL has a typo."""
    path = _sqlite_path(url)
    if path is not None and url.database not in (None, "", ":memory:") and not path.exists():
        raise LedgerError(
            f"there is no ledger at {_db.safe_url(url)}: the file {path} does not exist. Check "
            "--url (or $CALL4AGENTS_URL); agents create the ledger when they first run"
        )


def _open(args: argparse.Namespace) -> Ledger:
    from .ledger import Ledger

    url = _url(args)
    _require_existing(url)
    # Never change the schema from a reading command: an old ledger asks for `migrate`.
    return Ledger(
        url.render_as_string(hide_password=False), schema=_schema(args), auto_migrate=False
    )


def _engine(url: URL, schema: str | None) -> Engine:
    return _db.make_engine(
        url,
        durability="power",
        schema=schema,
        busy_timeout=30.0,
        allow_network_fs=os.environ.get("CALL4AGENTS_ALLOW_NETWORK_FS") == "1",
    )


# -- commands -------------------------------------------------------------------------------


def cmd_quickstart(args: argparse.Namespace) -> int:
    from . import quickstart

    rest: list[str] = list(args.rest)
    if getattr(args, "url", None):
        rest = ["--url", args.url, *rest]
    return int(quickstart.main(rest))


def _why(record: EffectRecord) -> str:
    # The tool's own error says more than the generic note that it raised; a lapsed lease or a
    # dead worker has only the note.
    return record.error or record.note or ""


def cmd_doubt(args: argparse.Namespace) -> int:
    with _open(args) as ledger:
        found = ledger.in_doubt()
    if args.json:
        _print_json([r.as_dict() for r in found])
    elif not found:
        print("No actions in doubt.")
    else:
        now = time.time()
        rows = [
            [
                r.key[:12],
                r.run_id,
                r.tool,
                str(r.attempt),
                _ago(r.updated_at, now),
                _trim(_why(r), 60),
            ]
            for r in found
        ]
        # A late result is often the answer to "did it happen?": show it under its action.
        below = {i: lines for i, r in enumerate(found) if (lines := _evidence_lines(r))}
        print(_table(["KEY", "RUN", "TOOL", "ATTEMPT", "SINCE", "WHY"], rows, below))
        print(
            f"\n{len(found)} in doubt. Find out whether each happened, then: "
            f"{PROG} resolve KEY --happened [--result JSON] | --did-not-happen"
        )
    return EXIT_IN_DOUBT if found and args.fail_if_any else EXIT_OK


def cmd_resolve(args: argparse.Namespace) -> int:
    by = args.by or os.environ.get("USER") or os.environ.get("LOGNAME")
    if not by:
        raise ConfigurationError("say who found this out with --by NAME ($USER is not set)")
    result: Any = None
    if args.result is not None:
        if not args.happened:
            raise ConfigurationError("--result goes with --happened only")
        try:
            result = json.loads(args.result)
        except json.JSONDecodeError as exc:
            raise ConfigurationError(
                f'--result must be JSON, e.g. \'{{"id": "msg-1"}}\' or \'"sent"\' ({exc})'
            ) from None
    with _open(args) as ledger:
        record = ledger.resolve(
            args.key, happened=args.happened, result=result, by=by, note=args.note or ""
        )
    if args.json:
        _print_json(record.as_dict())
    else:
        what = "happened" if args.happened else "did not happen"
        print(f"Resolved {record.tool} in run {record.run_id}: {what} (by {by})")
    return EXIT_OK


def _decider(args: argparse.Namespace) -> str:
    by = args.by or os.environ.get("USER") or os.environ.get("LOGNAME")
    if not by:
        raise ConfigurationError("say who decides with --by NAME ($USER is not set)")
    return str(by)


def cmd_decide(args: argparse.Namespace) -> int:
    approve = args.command == "approve"
    by = _decider(args)
    with _open(args) as ledger:
        decide = ledger.approve if approve else ledger.deny
        request = decide(args.ticket, by=by, reason=args.reason)
    if args.json:
        _print_json(request.as_dict())
    else:
        args_text = json.dumps(request.args, separators=(",", ":"))
        verb = "Approved" if approve else "Denied"
        print(f"{verb} {request.tool}({_trim(args_text, 80)}) in run {request.run_id} (by {by})")
    return EXIT_OK


def cmd_approvals(args: argparse.Namespace) -> int:
    state = None if args.all else "pending"
    with _open(args) as ledger:
        found = ledger.approvals(args.run, state=state)
    if args.json:
        _print_json([r.as_dict() for r in found])
    elif not found:
        print("No approvals waiting." if state else "No approval tickets.")
    else:
        now = time.time()
        rows = [
            [
                r.ticket,
                r.run_id,
                r.tool,
                _trim(json.dumps(r.args, separators=(",", ":")), 60),
                r.state,
                _ago(r.requested_at, now),
            ]
            for r in found
        ]
        print(_table(["TICKET", "RUN", "TOOL", "ARGS", "STATE", "ASKED"], rows))
    return EXIT_OK


def cmd_runs(args: argparse.Namespace) -> int:
    if args.limit < 1:
        raise ConfigurationError("--limit must be at least 1")
    with _open(args) as ledger:
        ledger.sweep()  # so a dead worker's action shows as in doubt, not running
        found = ledger.runs(limit=args.limit)
        waiting = collections.Counter(a.run_id for a in ledger.approvals(state="pending"))
        found = _with_waiting_runs(found, ledger, waiting)[: args.limit]
    if args.json:
        _print_json(
            [{**dataclasses.asdict(r), "approvals_waiting": waiting[r.run_id]} for r in found]
        )
    elif not found:
        print("No runs recorded.")
    else:
        now = time.time()
        rows = [
            [
                r.run_id,
                str(r.actions),
                str(r.succeeded),
                str(r.failed),
                str(r.in_doubt),
                str(r.started),
                str(waiting[r.run_id]),
                _ago(r.last_at, now),
            ]
            for r in found
        ]
        headers = ["RUN", "ACTIONS", "DONE", "FAILED", "IN DOUBT", "RUNNING", "WAITING"]
        headers.append("LAST ACTIVE")
        print(_table(headers, rows))
    return EXIT_OK


def _with_waiting_runs(
    found: list[RunSummary], ledger: Ledger, waiting: collections.Counter[str]
) -> list[RunSummary]:
    """The runs with actions, and those whose only records are approvals waiting for a person."""
    from call4agents.engine.ledger import RunSummary

    known = {r.run_id for r in found}
    for run_id in waiting.keys() - known:
        asked = [a.requested_at for a in ledger.approvals(run_id)]
        found.append(RunSummary(run_id, 0, 0, 0, 0, 0, min(asked), max(asked)))
    return sorted(found, key=lambda r: r.last_at, reverse=True)


def _require_run(ledger: Ledger, run_id: str) -> None:
    """One error for a run the ledger does not know, the same from show, undo and export."""
    if ledger.effects(run_id) or ledger.run_status(run_id) or ledger.approvals(run_id):
        return
    raise LedgerError(
        f"no run {run_id!r} in this ledger (no actions, approvals or ending recorded): check the "
        f"run id and --url; `{PROG} runs` lists the runs"
    )


def _outcome(r: EffectRecord) -> str:
    if r.pruned_at is not None:
        return "(result pruned by gc)"
    if r.state == "succeeded":
        return r.result_json if r.result_json is not None else (r.note or "(no result stored)")
    if r.state == "started":
        return "(running)"
    return r.error or r.note or ""


def _extra_lines(r: EffectRecord) -> list[str]:
    lines = []
    if r.resolved_by:
        lines.append(f"note: {r.note or 'resolved by ' + r.resolved_by}")
    return lines + _evidence_lines(r)


def _evidence_lines(r: EffectRecord) -> list[str]:
    """Late outcomes of fenced-off attempts: kept to help decide, never applied."""
    lines = []
    for item in r.evidence:
        outcome = item.get("result") or item.get("error") or ""
        lines.append(
            f"evidence: attempt {item.get('attempt')} ended {item.get('state')} late: "
            f"{_trim(str(outcome), 60)} (kept, not applied)"
        )
    return lines


def cmd_show(args: argparse.Namespace) -> int:
    from call4agents.engine.runs import spending_text

    with _open(args) as ledger:
        if not args.handoff:  # --handoff answers "was it escalated?", for any run id
            _require_run(ledger, args.run)
        ledger.sweep()
        found = ledger.effects(args.run)
        waiting = ledger.approvals(args.run, state="pending")
        status = ledger.run_status(args.run)
        handoff = ledger.handoff(args.run) if status is not None else None
        spent = spending_text(ledger, args.run)
        noted = run_notes.run_text(ledger, args.run)
        document = run_notes.run_document(ledger, args.run) if args.json else None
    if args.handoff:
        return _show_handoff(args, handoff)
    if args.json:
        return _show_json(args, found, status, handoff, document)
    if not found:  # escalated before any action, or waiting for a person's answer
        print(f"Run {args.run}: no actions")
        if waiting:
            print(f"{len(waiting)} approval(s) waiting: `{PROG} approvals --run {args.run}`")
        if status is not None:
            print("\n" + _ending_text(status, handoff))
        return EXIT_OK
    rows, below = [], {}
    for i, r in enumerate(found):
        rows.append(
            [
                str(i + 1),
                r.tool,
                STATE_WORDS.get(r.state, r.state),
                str(r.attempt),
                _trim(_compact(r.args), 40),
                _trim(_outcome(r), 50),
                r.key[:12],
            ]
        )
        if extra := _extra_lines(r):
            below[i] = extra
    headers = ["#", "TOOL", "STATE", "ATTEMPT", "ARGS", "RESULT OR ERROR", "KEY"]
    print(f"Run {args.run}\n")
    print(_table(headers, rows, below))
    counts = {s: sum(r.state == s for r in found) for s in STATE_WORDS}
    summary = (
        f"{counts['succeeded']} done, {counts['in_doubt']} in doubt, {counts['failed']} failed"
    )
    if counts["started"]:
        summary += f", {counts['started']} running"
    print(f"\n{summary}")
    if spent:
        print(spent)
    if noted:
        print(noted)
    if status is not None:
        print("\n" + _ending_text(status, handoff))
    return EXIT_OK


def _ending_text(status: RunStatus, handoff: Handoff | None) -> str:
    """How a run control ended the run: the hand-off of an escalation, or the undo's outcome."""
    if handoff is not None and status.status == "escalated":
        return handoff.text()
    text = f"Run ended: {status.status.replace('_', ' ')} ({status.reason or 'no reason given'})"
    undo = status.details.get("undo")
    if undo:
        left = [i for i in undo["items"] if i["outcome"] not in ("undone", "already_undone")]
        text += "".join(f"\n  not reversed: {i['tool']}: {i['detail']}" for i in left)
    if handoff is not None:
        text += "\n\n" + handoff.text()
    return text


def _show_json(
    args: argparse.Namespace,
    found: Sequence[EffectRecord],
    status: RunStatus | None,
    handoff: Handoff | None,
    run: dict[str, Any] | None = None,
) -> int:
    """One document for the run: its actions, how a run control ended it, and its hand-off.

    ``--actions`` prints the list of actions alone, the shape ``--json`` had before.
    """
    actions = [r.as_dict() for r in found]
    if args.actions:
        _print_json(actions)
    else:
        _print_json(
            {
                "run_id": args.run,
                "actions": actions,
                "ending": _ending_document(status),
                "handoff": handoff.as_dict() if handoff is not None else None,
                "run": run,  # trigger, time, tool calls, reads (see run_notes.run_document)
            }
        )
    return EXIT_OK


def _ending_document(status: RunStatus | None) -> dict[str, Any] | None:
    if status is None:
        return None  # no run control ended it (still going, or ended by the agent itself)
    return {
        "status": status.status,
        "reason": status.reason,
        "details": status.details,
        "at": status.updated_at,
    }


def _show_handoff(args: argparse.Namespace, handoff: Handoff | None) -> int:
    if handoff is None:
        print(f"Run {args.run!r} was not escalated: there is no hand-off.", file=sys.stderr)
        return EXIT_FAILED
    if args.json:
        _print_json(handoff.as_dict())
    else:
        print(handoff.text())
    return EXIT_OK


def cmd_undo(args: argparse.Namespace) -> int:
    # The undo functions are registered when their tools are defined: import those modules.
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    for module in args.imports or []:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise ConfigurationError(f"--import {module}: cannot import it ({exc})") from exc
    with _open(args) as ledger:
        _require_run(ledger, args.run)
        report = ledger.undo(args.run)
    if args.json:
        _print_json(report.as_dict())
    else:
        print(report.text())
        if not report.complete:
            print(
                f"\n{len(report.not_reversed)} action(s) not reversed: settle them, then run "
                f"`{PROG} undo {args.run}` again (finished undos are never repeated)"
            )
    return EXIT_OK if report.complete else EXIT_FAILED


def cmd_gc(args: argparse.Namespace) -> int:
    seconds = parse_age(args.older_than)
    with _open(args) as ledger:
        report = ledger.gc(seconds)
    if args.json:
        _print_json({**dataclasses.asdict(report), "older_than_seconds": seconds})
    else:
        print(
            f"Pruned {report.pruned} finished actions (tombstones kept), deleted {report.deleted} "
            f"failed, kept {report.kept_open} open (started or in doubt)"
        )
    return EXIT_OK


def cmd_stats(args: argparse.Namespace) -> int:
    from call4agents.controls import stats

    since = parse_age(args.since) if args.since else None
    with _open(args) as ledger:
        figures = stats.compute(ledger, since)
        watched = stats.alert_figures(ledger, figures, since)
    if args.json:
        _print_json({**figures.as_dict(), "alerts": watched.as_dict()})
    else:
        print(stats.render(figures))
        print(stats.render_alerts(watched))
    return EXIT_OK


def cmd_alerts(args: argparse.Namespace) -> int:
    """Print the shipped Prometheus rules (``call4agents alerts > call4agents.rules.yml``)."""
    from importlib.resources import files

    print(files("call4agents").joinpath("alerts/call4agents.rules.yml").read_text(), end="")
    return EXIT_OK


def cmd_export(args: argparse.Namespace) -> int:
    from call4agents.controls.replay import export_run

    with _open(args) as ledger:
        _require_run(ledger, args.run)
        document = export_run(ledger, args.run)
    text_ = json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False)
    if args.out:
        Path(args.out).write_text(text_ + "\n", encoding="utf-8")
        print(f"Wrote {len(document['actions'])} action(s) of run {args.run} to {args.out}")
    else:
        print(text_)
    return EXIT_OK


def cmd_diff(args: argparse.Namespace) -> int:
    # `call4agents.replay` the attribute is the context manager, so import from the module.
    from call4agents.controls.replay import actions_of, diff, render_difference

    with _open(args) as ledger:
        a = actions_of(ledger, args.run_a)
        b = actions_of(ledger, args.run_b)
    for name, found in ((args.run_a, a), (args.run_b, b)):
        if not found and (name.endswith(".json") or os.sep in name):
            raise ConfigurationError(
                f"{name}: no such file (nor a run of that name in the ledger); give an exported "
                f"file that exists (`{PROG} export RUN --out FILE`) or a run id"
            )
        if not found:
            raise LedgerError(f"no actions recorded for run {name!r}: `{PROG} runs` lists the runs")
    difference = diff(a, b)
    if args.json:
        _print_json(None if difference is None else dataclasses.asdict(difference))
    else:
        print(render_difference(args.run_a, args.run_b, difference, (len(a), len(b))))
    return EXIT_OK if difference is None else EXIT_FAILED


def cmd_migrate(args: argparse.Namespace) -> int:
    url = _url(args)
    engine = _engine(url, _schema(args))
    try:
        before, after = migrations.migrate(engine, schema=_schema(args))
    except _sqlalchemy_error() as exc:
        raise LedgerError(
            f"cannot migrate the ledger at {_db.safe_url(url)}: {short_error(exc)}"
        ) from exc
    finally:
        engine.dispose()
    safe = _db.safe_url(url)
    if args.json:
        _print_json({"url": safe, "before": before, "after": after})
    elif before == after:
        print(f"Ledger at {safe}: already at version {after}")
    else:
        print(f"Ledger at {safe}: schema version {before} -> {after}")
    return EXIT_OK


# -- doctor ---------------------------------------------------------------------------------


@dataclasses.dataclass
class Check:
    name: str
    status: str  # OK | WARN | FAIL | SKIP
    detail: str


def _permission_check(path: Path) -> Check:
    loose = []
    for item in (path, path.with_name(path.name + "-wal"), path.parent / "secret"):
        if item.exists():
            mode = stat.S_IMODE(item.stat().st_mode)
            if mode & 0o077:
                loose.append(f"{item.name} is {mode:o}")
    if loose:
        return Check(
            "permissions", "WARN", f"{', '.join(loose)}: others may read it; chmod 600 (folder 700)"
        )
    return Check("permissions", "OK", f"{path} and its companions are owner-only")


# Past this size a full integrity_check reads for minutes; quick_check skips the index contents.
_QUICK_CHECK_BYTES = 256 << 20
_RECOVER = (
    "stop every worker, keep the damaged file aside, and restore the last backup (made with "
    '`sqlite3 ledger.db ".backup copy.db"` while in use); `sqlite3 damaged.db .recover` salvages '
    "rows, but an action whose row is lost may run again: check `doubt` before restarting"
)


def _damaged(exc: BaseException) -> bool:
    text = str(exc).lower()
    return "not a database" in text or "malformed" in text


def _integrity_check(engine: Engine, path: Path) -> Check:
    pragma = "quick_check" if path.stat().st_size > _QUICK_CHECK_BYTES else "integrity_check"
    with engine.connect() as conn:
        found = [str(row[0]) for row in conn.exec_driver_sql(f"PRAGMA {pragma}").fetchmany(5)]
    if found == ["ok"]:
        return Check("integrity", "OK", f"PRAGMA {pragma}: ok")
    return Check("integrity", "FAIL", f"PRAGMA {pragma}: {'; '.join(found)}; {_RECOVER}")


def _durability_check(engine: Engine, dialect: str) -> Check:
    from sqlalchemy import text

    with engine.connect() as conn:
        if dialect == "sqlite":
            level = int(conn.exec_driver_sql("PRAGMA synchronous").scalar() or 0)
            name = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}.get(level, str(level))
            return Check(
                "durability",
                "OK",
                f"sqlite; this process opens it with synchronous={name}"
                " (each process chooses: durability='power' = FULL, the default)",
            )
        fsync = conn.execute(text("SHOW fsync")).scalar()
        sync = conn.execute(text("SHOW synchronous_commit")).scalar()
    detail = f"postgresql; fsync={fsync}, synchronous_commit={sync}"
    if fsync != "on":
        return Check("durability", "WARN", detail + ": a crash can lose or corrupt commits")
    if sync == "off":
        return Check("durability", "WARN", detail + ": commits may not survive a server crash")
    return Check("durability", "OK", detail)


def _secret_check(url: URL, schema: str | None) -> Check:
    from .ledger import Ledger

    with Ledger(
        url.render_as_string(hide_password=False), schema=schema, auto_migrate=False
    ) as ledger:
        source = ledger.secret_source()  # looks only: never creates a secret file
    if source is None:
        return Check(
            "secret", "WARN", "none set: approvals need CALL4AGENTS_SECRET on every worker"
        )
    return Check("secret", "OK", f"available (from {source})")


def _schema_check(version: int) -> Check:
    if version == migrations.CURRENT:
        return Check("schema", "OK", f"version {version} (current)")
    if version == 0:
        return Check(
            "schema",
            "FAIL",
            f"no ledger tables here: check --url/--schema, or create them with `{PROG} migrate`",
        )
    if version < migrations.CURRENT:
        return Check(
            "schema",
            "FAIL",
            f"version {version}, this call4agents needs {migrations.CURRENT}: run `{PROG} migrate`",
        )
    return Check(
        "schema",
        "FAIL",
        f"version {version} is newer than this call4agents knows "
        f"({migrations.CURRENT}): upgrade call4agents",
    )


def _tls_check(conn: Connection, url: URL) -> Check:
    """Whether this connection is encrypted; only a warning when the server is on another host."""
    from sqlalchemy import text

    row = conn.execute(
        text("SELECT ssl, version FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
    ).one_or_none()
    if row is not None and row[0]:
        return Check("tls", "OK", f"the connection is encrypted ({row[1]})")
    host = url.query.get("host") or url.host or ""
    if not host or str(host).startswith("/") or host in ("localhost", "127.0.0.1", "::1"):
        return Check("tls", "OK", "not encrypted, on this machine")
    return Check(
        "tls",
        "WARN",
        f"not encrypted to {host}: add ?sslmode=verify-full&sslrootcert=<CA file> to the URL",
    )


def _clock_check(skew: float) -> Check:
    skew = round(skew, 1) + 0.0  # no "-0.0s"
    detail = f"database clock is {skew:+.1f}s from this machine's"
    if abs(skew) <= CLOCK_SKEW_WARN:
        return Check("clock", "OK", detail)
    return Check(
        "clock",
        "WARN",
        detail + " (leases follow the database clock; ages shown here are off by as much)",
    )


def _actions_check(engine: Engine) -> Check:
    from sqlalchemy import func, select

    from call4agents.storage.tables import effects, open_states

    with engine.connect() as conn:
        found = conn.execute(
            select(effects.c.state, func.count()).where(open_states()).group_by(effects.c.state)
        ).all()
    counts = {state: int(n) for state, n in found}
    doubt, started = counts.get("in_doubt", 0), counts.get("started", 0)
    detail = f"{started} started, {doubt} in doubt"
    return (
        Check("actions", "WARN", f"{detail}: see `{PROG} doubt`")
        if doubt
        else Check("actions", "OK", detail)
    )


def _doctor_checks(args: argparse.Namespace) -> list[Check]:
    from sqlalchemy import select

    from call4agents.storage.store import now_sql

    try:
        url = _url(args)
    except Call4AgentsError as exc:
        return [Check("url", "FAIL", str(exc))]
    schema = _schema(args)
    checks = [Check("url", "OK", _db.safe_url(url) + (f" (schema {schema})" if schema else ""))]
    path = _sqlite_path(url)
    if path is not None and not path.exists():
        return [*checks, Check("database", "FAIL", f"no ledger file at {path}: check --url")]
    try:
        engine = _engine(url, schema)
    except Call4AgentsError as exc:
        return [*checks, Check("database", "FAIL", str(exc))]
    try:
        with engine.connect() as conn:
            version = migrations.current_version(conn, schema)
            skew = float(conn.execute(select(now_sql(engine.dialect.name))).scalar_one())
            skew -= time.time()
            journal = conn.exec_driver_sql("PRAGMA journal_mode").scalar() if path else None
            tls = _tls_check(conn, url) if engine.dialect.name == "postgresql" else None
        checks.append(Check("database", "OK", f"the {engine.dialect.name} database opens"))
        checks.append(_schema_check(version))
        checks.append(_durability_check(engine, engine.dialect.name))
        if path is not None:
            wal = str(journal).lower() == "wal"
            why = "" if wal else ": WAL is needed for concurrent workers"
            checks.append(Check("journal", "OK" if wal else "FAIL", f"journal_mode={journal}{why}"))
            checks.append(_permission_check(path))
            checks.append(_integrity_check(engine, path))
        if tls is not None:
            checks.append(tls)
        checks.append(_clock_check(skew))
        if version == migrations.CURRENT:
            checks += [_actions_check(engine), _secret_check(url, schema)]
        else:
            checks += [
                Check(name, "SKIP", "needs the current schema") for name in ("actions", "secret")
            ]
    except (_sqlalchemy_error(), OSError) as exc:
        hint = f"; {_RECOVER}" if path is not None and _damaged(exc) else ""
        checks.append(
            Check("database", "FAIL", f"cannot use the database: {short_error(exc)}{hint}")
        )
    except Call4AgentsError as exc:
        checks.append(Check("database", "FAIL", str(exc)))
    finally:
        engine.dispose()
    return checks


def cmd_doctor(args: argparse.Namespace) -> int:
    checks = _doctor_checks(args)
    ok = all(c.status != "FAIL" for c in checks)
    if args.json:
        _print_json({"ok": ok, "checks": [dataclasses.asdict(c) for c in checks]})
    else:
        width = max(len(c.name) for c in checks)
        for c in checks:
            print(f"{c.status:<4}  {c.name:<{width}}  {c.detail}")
    return EXIT_OK if ok else EXIT_FAILED


def cmd_console(args: argparse.Namespace) -> int:
    try:
        from call4agents.console import ConsoleSettings, serve
    except ImportError as exc:
        raise ConfigurationError(str(exc)) from exc
    for module in args.imports or []:  # their tools' undo= functions, for the Undo button
        _import(module)
    settings = ConsoleSettings(
        operator=_operator(args),
        token=None if args.user_header else secrets.token_urlsafe(24),
        user_header=args.user_header,
        role_header=args.role_header,
        read_only=args.read_only,
        read_only_users=frozenset(n.strip() for n in args.read_only_users.split(",") if n.strip()),
    )
    webhook = None
    if args.webhook_url:
        secret = os.environ.get(args.webhook_secret_env, "")
        if not secret:
            raise ConfigurationError(
                f"--webhook-url needs an HMAC secret in ${args.webhook_secret_env}: set it to a "
                "long random value the receiver also knows"
            )
        webhook = (args.webhook_url, secret.encode())
    with _open(args) as ledger:
        serve(ledger, settings, host=args.host, port=args.port, webhook=webhook)
    return EXIT_OK


def _operator(args: argparse.Namespace) -> str:
    """Token mode records decisions under one name: --operator, else the OS user."""
    if args.operator:
        return str(args.operator)
    if args.user_header:
        return ""  # each request names its own user
    try:
        return getpass.getuser()
    except (OSError, KeyError) as exc:
        raise ConfigurationError("say who decides with --operator NAME (no OS user name)") from exc


def _import(module: str) -> None:
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        importlib.import_module(module)
    except ImportError as exc:
        raise ConfigurationError(f"--import {module}: cannot import it ({exc})") from exc


# -- the parser -----------------------------------------------------------------------------


def _common() -> _Parser:
    # SUPPRESS defaults let the options go before or after the command name.
    common = _Parser(add_help=False)
    common.add_argument(
        "--url",
        default=argparse.SUPPRESS,
        help="ledger URL (default: $CALL4AGENTS_URL, else sqlite:///.c4a/ledger.db)",
    )
    common.add_argument(
        "--schema", default=argparse.SUPPRESS, help="PostgreSQL schema that holds the ledger tables"
    )
    common.add_argument(
        "--json",
        action="store_true",
        default=argparse.SUPPRESS,
        help="print one JSON document on stdout",
    )
    return common


def build_parser() -> argparse.ArgumentParser:
    common = _common()
    parser = _Parser(
        prog=PROG, parents=[common], description="Inspect and settle a Call4Agents ledger."
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    def command(name: str, handler: Callable[[argparse.Namespace], int], help_: str) -> Any:
        p = sub.add_parser(name, parents=[common], help=help_, description=help_)
        p.set_defaults(handler=handler)
        return p

    p = command("quickstart", cmd_quickstart, "watch a killed agent resume without re-sending")
    p.add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)

    p = command("doubt", cmd_doubt, "list the actions in doubt")
    p.add_argument(
        "--fail-if-any",
        action="store_true",
        help=f"exit {EXIT_IN_DOUBT} when any action is in doubt (for cron or CI)",
    )

    p = command("resolve", cmd_resolve, "record whether an in-doubt action happened")
    p.add_argument("key", help="the action key, or a unique prefix of at least 6 characters")
    how = p.add_mutually_exclusive_group(required=True)
    how.add_argument("--happened", action="store_true", help="it happened: repeats return --result")
    how.add_argument(
        "--did-not-happen",
        dest="happened",
        action="store_false",
        help="it did not happen: the next call runs it as a new attempt",
    )
    p.add_argument("--result", metavar="JSON", help="the result it had, as JSON (with --happened)")
    p.add_argument("--by", metavar="WHO", help="who found this out (default: $USER)")
    p.add_argument("--note", metavar="TEXT", help="how it was found out")

    for name, verb in (("approve", "a yes to"), ("deny", "a no to")):
        p = command(name, cmd_decide, f"record {verb} the exact call an approval ticket shows")
        p.add_argument("ticket", help="the ticket id (apr_...)")
        p.add_argument("--by", metavar="WHO", help="who decides (default: $USER)")
        p.add_argument("--reason", metavar="TEXT", help="why (recorded with the decision)")

    p = command("approvals", cmd_approvals, "list approval tickets waiting for a person")
    p.add_argument("--run", metavar="RUN", help="only this run")
    p.add_argument("--all", action="store_true", help="every ticket, not only pending ones")

    p = command("runs", cmd_runs, "list the most recently active runs")
    p.add_argument("--limit", type=int, default=20, metavar="N", help="at most N runs (default 20)")

    p = command("show", cmd_show, "show one run's actions in order")
    p.add_argument("run", help="the run id")
    p.add_argument(
        "--handoff",
        action="store_true",
        help="only the hand-off of an escalated run (with --json: one document for a ticket)",
    )
    p.add_argument(
        "--actions",
        action="store_true",
        help="with --json: only the list of actions, without the ending and hand-off",
    )

    p = command("undo", cmd_undo, "reverse a run's succeeded actions, newest first")
    p.add_argument("run", help="the run id")
    p.add_argument(
        "--import",
        dest="imports",
        action="append",
        metavar="MODULE",
        help="import MODULE first, so its tools' undo= functions are known (repeatable)",
    )

    p = command("gc", cmd_gc, "prune finished actions older than an age")
    p.add_argument(
        "--older-than",
        required=True,
        metavar="AGE",
        help="like 30d, 12h, 15m, 45s, or plain seconds",
    )

    p = command("stats", cmd_stats, "health figures: in doubt, approvals waiting, irreversible")
    p.add_argument("--since", metavar="AGE", help="only actions started in the last AGE (24h)")

    command("alerts", cmd_alerts, "print Prometheus alerting and recording rules to load")

    p = command("export", cmd_export, "write a run's recorded actions to a replay file")
    p.add_argument("run", help="the run id")
    p.add_argument("--out", metavar="FILE", help="the file to write (default: stdout)")

    p = command("diff", cmd_diff, "show the first action where two runs differ")
    p.add_argument("run_a", help="a run id, or an exported .json file")
    p.add_argument("run_b", help="a run id, or an exported .json file")

    p = command("console", cmd_console, "serve the operator console in a browser")
    _console_options(p)

    command("migrate", cmd_migrate, "bring the ledger schema up to this version")
    command("doctor", cmd_doctor, "check the ledger's setup")
    return parser


def _console_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=CONSOLE_PORT, help=f"port (default {CONSOLE_PORT})")
    p.add_argument("--operator", metavar="NAME", help="who decides, in token mode (default: $USER)")
    p.add_argument(
        "--user-header",
        metavar="NAME",
        help="trust this header, set by an SSO proxy in front, to name the signed-in user",
    )
    p.add_argument(
        "--role-header",
        metavar="NAME",
        help="a header whose value read-only (or viewer) gives that user read-only access",
    )
    p.add_argument("--read-only", action="store_true", help="everyone sees, nobody decides")
    p.add_argument(
        "--read-only-users",
        metavar="NAMES",
        default="",
        help="comma-separated users who see everything and decide nothing",
    )
    p.add_argument(
        "--import",
        dest="imports",
        action="append",
        metavar="MODULE",
        help="import MODULE first, so its tools' undo= functions are known (repeatable)",
    )
    p.add_argument("--webhook-url", metavar="URL", help="POST a signed JSON event here")
    p.add_argument(
        "--webhook-secret-env",
        metavar="VAR",
        default="CALL4AGENTS_WEBHOOK_SECRET",
        help="the environment variable holding the webhook's HMAC secret",
    )


def _version() -> str:
    from call4agents import __version__

    return __version__


def _dash_values(argv: list[str]) -> list[str]:
    """``--older-than -3d`` as ``--older-than=-3d``: argparse would take the value for an option,
    and the age check can then say what is wrong with it."""
    joined: list[str] = []
    for arg in argv:
        if joined and joined[-1] in ("--older-than", "--since") and arg.startswith("-"):
            joined[-1] = f"{joined[-1]}={arg}"
        else:
            joined.append(arg)
    return joined


def _quickstart_rest(argv: list[str]) -> list[str] | None:
    """The arguments after ``quickstart``, passed through untouched (it has its own parser)."""
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in ("--url", "--schema"):
            i += 2
        elif arg == "--json" or arg.startswith(("--url=", "--schema=")):
            i += 1
        else:
            return argv[i + 1 :] if arg == "quickstart" else None
    return None


def _password(argv: list[str]) -> str | None:
    raw = os.environ.get("CALL4AGENTS_URL")
    for i, arg in enumerate(argv):
        if arg == "--url" and i + 1 < len(argv):
            raw = argv[i + 1]
        elif arg.startswith("--url="):
            raw = arg[len("--url=") :]
    try:
        return _db.parse_url(raw).password if raw else None
    except Call4AgentsError:
        return None


def _fail(message: str, argv: list[str]) -> int:
    password = _password(argv)
    if password:
        message = message.replace(str(password), "***")
    message = " ".join(message.split())
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return EXIT_ERROR


def main(argv: list[str] | None = None) -> int:
    """Run one command; returns the exit code (0 ok, 1 check failed, 2 error, 3 in doubt)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        rest = _quickstart_rest(argv)
        if rest is not None:  # parse only what comes before it: the rest is quickstart's own
            args = build_parser().parse_args(argv[: len(argv) - len(rest)])
            args.rest = rest
        else:
            args = build_parser().parse_args(_dash_values(argv))
        args.json = getattr(args, "json", False)
        if getattr(args, "handler", None) is None:  # no command: say what there is
            build_parser().print_help()
            return EXIT_OK
        handler: Callable[[argparse.Namespace], int] = args.handler
        return handler(args)
    except UsageError as exc:
        return _fail(str(exc), argv)
    except Call4AgentsError as exc:
        return _fail(str(exc), argv)
    except SystemExit as exc:  # --help and --version
        return (
            exc.code if isinstance(exc.code, int) else EXIT_OK if exc.code is None else EXIT_ERROR
        )
    except KeyboardInterrupt:
        return 130
    except OSError as exc:
        if isinstance(exc, BrokenPipeError):  # `call4agents show x | head`
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - stop the flush at exit failing
            return EXIT_OK
        return _fail(str(exc), argv)
    # Last: naming it loads SQLAlchemy, which --help and --version do not need.
    except _sqlalchemy_error() as exc:
        return _fail(f"the ledger database failed: {short_error(exc)}", argv)


if __name__ == "__main__":
    raise SystemExit(main())
