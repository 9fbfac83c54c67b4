"""The commands that read and settle a ledger: doubt, resolve, approvals, runs, show, undo, gc."""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from call4agents.engine.records import STATE_WORDS
from call4agents.model.ages import ago
from call4agents.model.errors import ConfigurationError, LedgerError

from ._base import (
    EXIT_FAILED,
    EXIT_IN_DOUBT,
    EXIT_OK,
    PROG,
    _compact,
    _db,
    _engine,
    _open,
    _print_json,
    _schema,
    _table,
    _trim,
    _url,
    import_tools,
    migrations,
    parse_age,
    run_notes,
    urls,
)

if TYPE_CHECKING:
    from call4agents.engine.endings import Handoff, RunStatus
    from call4agents.engine.records import EffectRecord
    from call4agents.facade.ledger import Ledger


# -- commands -------------------------------------------------------------------------------


def cmd_quickstart(args: argparse.Namespace) -> int:
    from call4agents.facade import quickstart

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
                ago(r.updated_at, now),
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
        # A wrong key first: asking for a name, then refusing the key, wastes a try.
        with _open(args) as ledger:
            ledger.effect(args.key)
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
        args_text = _trim(_compact(request.args), 80)
        verb = "Approved" if approve else "Denied"
        print(f"{verb} {request.tool}({args_text}) in run {request.run_id} (by {by})")
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
                _trim(_compact(r.args), 60),
                r.state,
                ago(r.requested_at, now),
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
        found = ledger.runs(limit=args.limit, waiting=True)[: args.limit]
        waiting = collections.Counter(ledger.waiting_by_run([r.run_id for r in found]))
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
                ago(r.last_at, now),
            ]
            for r in found
        ]
        headers = ["RUN", "ACTIONS", "DONE", "FAILED", "IN DOUBT", "RUNNING", "WAITING"]
        headers.append("LAST ACTIVE")
        print(_table(headers, rows))
    return EXIT_OK


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
    from call4agents.engine.budgets import spending_text

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
    for module in args.imports or []:
        import_tools(module)
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
    except _db.DatabaseFault as exc:
        raise LedgerError(
            f"cannot migrate the ledger at {urls.safe_url(url)}: {_db.short_error(exc)}"
        ) from exc
    finally:
        engine.dispose()
    safe = urls.safe_url(url)
    if args.json:
        _print_json({"url": safe, "before": before, "after": after})
    elif before == after:
        print(f"Ledger at {safe}: already at version {after}")
    else:
        print(f"Ledger at {safe}: schema version {before} -> {after}")
    return EXIT_OK


def cmd_audit(args: argparse.Namespace) -> int:
    """Every decision and settlement, newest first; ``--csv`` for a spreadsheet."""
    from call4agents.storage.audit_rows import arguments, as_csv, as_records

    since = time.time() - parse_age(args.since) if args.since else None
    with _open(args) as ledger:
        found = ledger.audit(
            by=args.by,
            action=args.action,
            run_id=args.run,
            tool=args.tool,
            since=since,
            before=args.before,
            limit=args.limit,
        )
        # An export carries the arguments decided on, redacted as the card showed them.
        shown = arguments(ledger.store, found) if args.csv or args.json else {}
    if args.csv:
        print(as_csv(found, shown), end="")
    elif args.json:
        _print_json(as_records(found, shown))
    elif not found:
        print("No decisions or settlements recorded" + (" that match." if _filtered(args) else "."))
    else:
        now = time.time()
        rows = [
            [str(e.id), ago(e.at, now), e.actor, e.action, e.run_id, e.tool, e.ticket or e.key[:12]]
            for e in found
        ]
        below = {i: [f"reason: {_trim(e.reason, 90)}"] for i, e in enumerate(found) if e.reason}
        print(_table(["id", "when", "who", "what", "run", "tool", "ticket/key"], rows, below))
        if len(found) == args.limit:
            print(f"More: add --before {found[-1].id}")
    return EXIT_OK


def _filtered(args: argparse.Namespace) -> bool:
    return any((args.by, args.action, args.run, args.tool, args.since, args.before))
