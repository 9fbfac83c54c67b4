"""The `call4agents` command: look into a ledger, settle actions in doubt, prune, migrate, check.

    call4agents doubt --fail-if-any          # cron / CI: exit 3 while anything is in doubt
    call4agents resolve 3f2a9c1b4d5e --happened --result '{"id": "msg-1"}' --by ann
    call4agents runs
    call4agents show ticket-1234
    call4agents gc --older-than 30d
    call4agents migrate
    call4agents doctor
    call4agents console                      # the operator console on http://127.0.0.1:8470
    call4agents webhooks --replay            # post again the webhook events given up on

Every command takes ``--url`` (default ``$CALL4AGENTS_URL``, else ``sqlite:///.c4a/ledger.db``),
``--schema`` (PostgreSQL) and ``--json`` (one JSON document on stdout). Errors are one line on
stderr and exit code 2; passwords in URLs are never printed.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import Any

from call4agents.model.errors import Call4AgentsError

from ._base import (
    CONSOLE_PORT,
    EXIT_ERROR,
    EXIT_FAILED,
    EXIT_IN_DOUBT,
    EXIT_OK,
    PROG,
    UsageError,
    _db,
    _Parser,
    parse_age,
    urls,
)
from ._commands import (
    cmd_alerts,
    cmd_approvals,
    cmd_audit,
    cmd_decide,
    cmd_diff,
    cmd_doubt,
    cmd_export,
    cmd_gc,
    cmd_migrate,
    cmd_quickstart,
    cmd_resolve,
    cmd_runs,
    cmd_show,
    cmd_stats,
    cmd_undo,
)
from ._doctor import cmd_console, cmd_doctor, cmd_webhooks

# -- the parser -----------------------------------------------------------------------------

# Every command, as build_parser makes them: a run builds the parser of its own alone.
COMMANDS = frozenset(
    (
        *("quickstart", "doubt", "resolve", "approve", "deny", "approvals", "runs", "show"),
        *("undo", "gc", "stats", "alerts", "export", "diff", "audit", "webhooks", "console"),
        *("migrate", "doctor"),
    )
)


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


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole command line, or with ``only`` the main options and that one command: a run of
    one command makes its own options, not the 80 of every other (argparse spends a formatter
    and a translation lookup on each, a few milliseconds of every start-up)."""
    common = _common()
    parser = _Parser(
        prog=PROG, parents=[common], description="Inspect and settle a Call4Agents ledger."
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    def command(name: str, handler: Callable[[argparse.Namespace], int], help_: str) -> Any:
        assert name in COMMANDS, f"add {name!r} to COMMANDS"
        if only is not None and name != only:
            return None
        p = sub.add_parser(name, parents=[common], help=help_, description=help_)
        p.set_defaults(handler=handler)
        return p

    if p := command("quickstart", cmd_quickstart, "watch a killed agent resume without re-sending"):
        p.add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)

    if p := command("doubt", cmd_doubt, "list the actions in doubt"):
        p.add_argument(
            "--fail-if-any",
            action="store_true",
            help=f"exit {EXIT_IN_DOUBT} when any action is in doubt (for cron or CI)",
        )

    if p := command("resolve", cmd_resolve, "record whether an in-doubt action happened"):
        p.add_argument("key", help="the action key, or a unique prefix of at least 6 characters")
        how = p.add_mutually_exclusive_group(required=True)
        how.add_argument(
            "--happened", action="store_true", help="it happened: repeats return --result"
        )
        how.add_argument(
            "--did-not-happen",
            dest="happened",
            action="store_false",
            help="it did not happen: the next call runs it as a new attempt",
        )
        p.add_argument(
            "--result", metavar="JSON", help="the result it had, as JSON (with --happened)"
        )
        p.add_argument("--by", metavar="WHO", help="who found this out (default: $USER)")
        p.add_argument("--note", metavar="TEXT", help="how it was found out")

    for name, verb in (("approve", "a yes to"), ("deny", "a no to")):
        if p := command(name, cmd_decide, f"record {verb} the exact call an approval ticket shows"):
            p.add_argument("ticket", help="the ticket id (apr_...)")
            p.add_argument("--by", metavar="WHO", help="who decides (default: $USER)")
            p.add_argument("--reason", metavar="TEXT", help="why (recorded with the decision)")

    if p := command("approvals", cmd_approvals, "list approval tickets waiting for a person"):
        p.add_argument("--run", metavar="RUN", help="only this run")
        p.add_argument("--all", action="store_true", help="every ticket, not only pending ones")

    if p := command("runs", cmd_runs, "list the most recently active runs"):
        p.add_argument(
            "--limit", type=int, default=20, metavar="N", help="at most N runs (default 20)"
        )

    if p := command("show", cmd_show, "show one run's actions in order"):
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

    if p := command("undo", cmd_undo, "reverse a run's succeeded actions, newest first"):
        p.add_argument("run", help="the run id")
        p.add_argument(
            "--import",
            dest="imports",
            action="append",
            metavar="MODULE",
            help="import MODULE first, so its tools' undo= functions are known (repeatable)",
        )

    if p := command("gc", cmd_gc, "prune finished actions older than an age"):
        p.add_argument(
            "--older-than",
            required=True,
            metavar="AGE",
            help="like 30d, 12h, 15m, 45s, or plain seconds",
        )

    if p := command(
        "stats", cmd_stats, "health figures: in doubt, approvals waiting, irreversible"
    ):
        p.add_argument("--since", metavar="AGE", help="only actions started in the last AGE (24h)")

    command("alerts", cmd_alerts, "print Prometheus alerting and recording rules to load")

    if p := command("export", cmd_export, "write a run's recorded actions to a replay file"):
        p.add_argument("run", help="the run id")
        p.add_argument("--out", metavar="FILE", help="the file to write (default: stdout)")

    if p := command("diff", cmd_diff, "show the first action where two runs differ"):
        p.add_argument("run_a", help="a run id, or an exported .json file")
        p.add_argument("run_b", help="a run id, or an exported .json file")

    if p := command("audit", cmd_audit, "every decision and settlement, newest first (kept by gc)"):
        p.add_argument("--by", metavar="WHO", help="only what this person (or `check`) decided")
        p.add_argument(
            "--action",
            choices=("approved", "denied", "happened", "did_not_happen"),
            help="only this kind of decision",
        )
        p.add_argument("--run", metavar="RUN", help="only this run")
        p.add_argument("--tool", metavar="TOOL", help="only this tool")
        p.add_argument("--since", metavar="AGE", help="only the last AGE (30d, 12h, ...)")
        p.add_argument("--before", type=int, metavar="ID", help="the next page: entries before ID")
        p.add_argument(
            "--limit", type=int, default=100, metavar="N", help="at most N (default 100)"
        )
        p.add_argument(
            "--csv", action="store_true", help="CSV with a header row, for a spreadsheet"
        )

    if p := command("webhooks", cmd_webhooks, "list webhook events given up on, or --replay them"):
        p.add_argument("--replay", action="store_true", help="post them again, oldest first")
        p.add_argument(
            "--webhook-url",
            action="append",
            default=[],
            metavar="URL",
            help="with --replay: a receiver's URL with its credentials (user:pass@), for its "
            "letters",
        )
        p.add_argument(
            "--to",
            metavar="URL",
            help="with --replay: send every letter here instead of its own URL",
        )
        p.add_argument(
            "--webhook-secret-env",
            metavar="VAR",
            default="CALL4AGENTS_WEBHOOK_SECRET",
            help="the environment variable holding the webhook's HMAC secret",
        )

    if p := command("console", cmd_console, "serve the operator console in a browser"):
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
        "--proxy-secret-header",
        metavar="NAME",
        help="header mode: a header the proxy adds holding a shared secret (from "
        "--proxy-secret-env); requests without it are refused",
    )
    p.add_argument(
        "--proxy-secret-env",
        metavar="VAR",
        default="CALL4AGENTS_PROXY_SECRET",
        help="the environment variable holding the proxy's shared secret",
    )
    p.add_argument(
        "--trusted-proxy",
        action="append",
        default=[],
        metavar="ADDRESS",
        help="header mode: the proxy's address or CIDR range; others are refused (repeatable)",
    )
    p.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="NAME",
        help="a host name requests may use besides loopback's, e.g. the proxy's (repeatable)",
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
    p.add_argument(
        "--webhook-url",
        action="append",
        default=[],
        metavar="URL",
        help="notify here (repeatable): http(s):// gets a signed JSON event (user:pass@ is sent "
        "as Basic auth), slack+https:// a Slack message, smtp://host:port?from=A&to=B an email",
    )
    p.add_argument(
        "--webhook-secret-env",
        metavar="VAR",
        default="CALL4AGENTS_WEBHOOK_SECRET",
        help="the environment variable holding the webhook's HMAC secret",
    )
    p.add_argument(
        "--public-url",
        metavar="URL",
        help="the console's address as people open it (behind a proxy), for the links in "
        "notifications; by default the address it listens on",
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


def _first_word(argv: list[str]) -> int | None:
    """Where the first word after the global options (``--url``, ``--schema``, ``--json``) is."""
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in ("--url", "--schema"):
            i += 2
        elif arg == "--json" or arg.startswith(("--url=", "--schema=")):
            i += 1
        else:
            return i
    return None


def _quickstart_rest(argv: list[str]) -> list[str] | None:
    """The arguments after ``quickstart``, passed through untouched (it has its own parser)."""
    i = _first_word(argv)
    return argv[i + 1 :] if i is not None and argv[i] == "quickstart" else None


def _command_of(argv: list[str]) -> str | None:
    """The command ``argv`` runs, if it names one before anything that needs the whole parser
    (``--help``, ``--version``, an unknown word: their output lists every command)."""
    i = _first_word(argv)
    return argv[i] if i is not None and argv[i] in COMMANDS else None


def _password(argv: list[str]) -> str | None:
    raw = os.environ.get("CALL4AGENTS_URL")
    for i, arg in enumerate(argv):
        if arg == "--url" and i + 1 < len(argv):
            raw = argv[i + 1]
        elif arg.startswith("--url="):
            raw = arg[len("--url=") :]
    try:
        return urls.parse_url(raw).password if raw else None
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
            args = build_parser("quickstart").parse_args(argv[: len(argv) - len(rest)])
            args.rest = rest
        else:
            args = build_parser(_command_of(argv)).parse_args(_dash_values(argv))
        args.json = getattr(args, "json", False)
        if getattr(args, "handler", None) is None:  # no command: say what there is
            build_parser().print_help(sys.stderr)
            return EXIT_ERROR
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
    except _db.DatabaseFault as exc:
        return _fail(str(_db.database_failed(exc)), argv)


if __name__ == "__main__":
    raise SystemExit(main())


__all__ = [
    "EXIT_ERROR",
    "EXIT_FAILED",
    "EXIT_IN_DOUBT",
    "EXIT_OK",
    "build_parser",
    "main",
    "parse_age",
]
