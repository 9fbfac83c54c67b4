"""``call4agents doctor``: is the ledger usable from here; and ``call4agents console``."""

from __future__ import annotations

import argparse
import dataclasses
import getpass
import importlib
import importlib.util
import os
import secrets
import stat
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from call4agents.model import platform
from call4agents.model.ages import ago
from call4agents.model.errors import Call4AgentsError, ConfigurationError, LedgerError

from ._base import (
    CLOCK_SKEW_WARN,
    EXIT_FAILED,
    EXIT_OK,
    PROG,
    _db,
    _engine,
    _open,
    _print_json,
    _schema,
    _sqlite_path,
    _table,
    _url,
    diagnose,
    migrations,
    urls,
)

if TYPE_CHECKING:
    from call4agents.controls.webhooks import Webhooks
    from call4agents.storage._db import URL, Engine


# -- doctor ---------------------------------------------------------------------------------


@dataclasses.dataclass
class Check:
    name: str
    status: str  # OK | WARN | FAIL | SKIP
    detail: str


def _permission_check(path: Path) -> Check:
    if not platform.file_owners():
        return Check("permissions", "SKIP", "not checked on this platform (Windows: access lists)")
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
    quick = path.stat().st_size > _QUICK_CHECK_BYTES
    pragma, found = diagnose.integrity(engine, quick=quick)
    if found == ["ok"]:
        return Check("integrity", "OK", f"PRAGMA {pragma}: ok")
    return Check("integrity", "FAIL", f"PRAGMA {pragma}: {'; '.join(found)}; {_RECOVER}")


def _durability_check(engine: Engine) -> Check:
    found = diagnose.durability(engine)
    if "synchronous" in found:
        return Check(
            "durability",
            "OK",
            f"sqlite; this process opens it with synchronous={found['synchronous']}"
            " (each process chooses: durability='power' = FULL, the default)",
        )
    fsync, sync = found["fsync"], found["synchronous_commit"]
    detail = f"postgresql; fsync={fsync}, synchronous_commit={sync}"
    if fsync != "on":
        return Check("durability", "WARN", detail + ": a crash can lose or corrupt commits")
    if sync == "off":
        return Check("durability", "WARN", detail + ": commits may not survive a server crash")
    return Check("durability", "OK", detail)


def _pooler_check(engine: Engine, url: URL) -> Check:
    """The pooler the URL names (``c4a_pooler``) beside the PgBouncer found at its address."""
    named = _db.pooler_of(url, None)
    said = f"the URL says c4a_pooler={named}" if named else "the URL names no pooler"
    found = diagnose.pgbouncer(engine)
    if found is None:
        return Check("pooler", "OK", f"{said}; no PgBouncer answers at this address")
    what = f"PgBouncer {found.version}" if found.version else "PgBouncer"
    what += f", pool_mode={found.mode}" if found.mode else " (its console does not say its mode)"
    if found.mode == "statement":
        return Check("pooler", "FAIL", f"{what}: {_db.STATEMENT_MODE}")
    if found.mode == "transaction" and named != "transaction":
        return Check(
            "pooler",
            "FAIL",
            f"{what}; {said}: add ?{_db.POOLER_SETTING}=transaction to the URL, or prepared "
            "statements and LISTEN break behind it",
        )
    return Check("pooler", "OK", f"{what}; {said}")


_SYNC_HINT = (
    "set synchronous_standby_names (e.g. 'ANY 1 (*)') and synchronous_commit=on on the primary, "
    "so that a result is acknowledged only once a standby has it"
)


def _replication_check(engine: Engine) -> Check:
    """Whether a failover to a standby keeps every result the primary acknowledged."""
    found = diagnose.replication(engine)
    names, commit = found.synchronous_standby_names.strip(), found.synchronous_commit
    states = [state for _, state in found.standbys]
    if found.standby:
        return Check("replication", "FAIL", "this server is a standby (read-only): use the primary")
    if not states:
        if names:
            return Check(
                "replication",
                "WARN",
                f"synchronous_standby_names={names!r} but no standby is connected: commits wait",
            )
        return Check("replication", "OK", "no standby streams from this server")
    counted = f"{len(states)} standby(s), sync_state {', '.join(str(s) for s in states)}"
    if None in states:
        return Check("replication", "WARN", f"{counted}: cannot read them (grant pg_monitor)")
    synchronous = any(s in ("sync", "quorum") for s in states)
    if not synchronous or commit in ("off", "local"):
        return Check(
            "replication",
            "WARN",
            f"{counted}, synchronous_commit={commit}: a failover can lose results the primary "
            f"acknowledged (those actions run again or read in doubt); {_SYNC_HINT}",
        )
    return Check(
        "replication",
        "OK",
        f"{counted}, synchronous_commit={commit}: an acknowledged result survives a failover",
    )


def _secret_check(url: URL, schema: str | None) -> Check:
    from call4agents.facade.ledger import Ledger

    with Ledger(
        url.render_as_string(hide_password=False), schema=schema, auto_migrate=False, open_retry=0
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
    try:
        migrations.refuse_unknown(version)  # newer, or a development build's
    except LedgerError as exc:
        return Check("schema", "FAIL", str(exc))
    return Check(
        "schema",
        "FAIL",
        f"version {version}, this call4agents needs {migrations.CURRENT}: run `{PROG} migrate`",
    )


def _tls_check(tls: tuple[bool, str | None], url: URL) -> Check:
    """Whether this connection is encrypted; only a warning when the server is on another host."""
    encrypted, version = tls
    if encrypted:
        return Check("tls", "OK", f"the connection is encrypted ({version})")
    given = url.query.get("host") or url.host or ""
    # libpq's host list ("h1,h2", or SQLAlchemy's repeated "h:port"): local only if every host is.
    names = [n for part in ((given,) if isinstance(given, str) else given) for n in part.split(",")]
    names = [n.rsplit(":", 1)[0] if n.count(":") == 1 else n for n in names]
    host = ",".join(names)
    if all(not n or n.startswith("/") or n in ("localhost", "127.0.0.1", "::1") for n in names):
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
    counts = diagnose.open_actions(engine)
    doubt, started = counts.get("in_doubt", 0), counts.get("started", 0)
    detail = f"{started} started, {doubt} in doubt"
    return (
        Check("actions", "WARN", f"{detail}: see `{PROG} doubt`")
        if doubt
        else Check("actions", "OK", detail)
    )


def _doctor_checks(args: argparse.Namespace) -> list[Check]:
    try:
        url = _url(args)
    except Call4AgentsError as exc:
        return [Check("url", "FAIL", str(exc))]
    schema = _schema(args)
    checks = [Check("url", "OK", urls.safe_url(url) + (f" (schema {schema})" if schema else ""))]
    path = _sqlite_path(url)
    if path is not None and not path.exists():
        return [*checks, Check("database", "FAIL", f"no ledger file at {path}: check --url")]
    try:
        engine = _engine(url, schema)
    except Call4AgentsError as exc:
        return [*checks, Check("database", "FAIL", str(exc))]
    try:
        found = diagnose.facts(engine, schema)
        version, journal, skew = found.version, found.journal, found.clock - time.time()
        tls = _tls_check(found.tls, url) if found.tls is not None else None
        checks.append(Check("database", "OK", f"the {engine.dialect.name} database opens"))
        checks.append(_schema_check(version))
        checks.append(_durability_check(engine))
        if path is not None:
            wal = str(journal).lower() == "wal"
            why = "" if wal else ": WAL is needed for concurrent workers"
            checks.append(Check("journal", "OK" if wal else "FAIL", f"journal_mode={journal}{why}"))
            checks.append(_permission_check(path))
            checks.append(_integrity_check(engine, path))
        if tls is not None:
            checks += [tls, _pooler_check(engine, url), _replication_check(engine)]
        checks.append(_clock_check(skew))
        if version == migrations.CURRENT:
            checks += [_actions_check(engine), _secret_check(url, schema)]
        else:
            checks += [
                Check(name, "SKIP", "needs the current schema") for name in ("actions", "secret")
            ]
    except (_db.DatabaseFault, OSError) as exc:
        hint = f"; {_RECOVER}" if path is not None and _damaged(exc) else ""
        refused = _db.statement_mode_refusal(exc)
        checks.append(
            Check("pooler", "FAIL", str(refused))
            if refused
            else Check("database", "FAIL", f"cannot use the database: {_db.short_error(exc)}{hint}")
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
        from call4agents.console import ConsoleSettings, proxy_networks, serve
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
        proxy_secret_header=args.proxy_secret_header,
        proxy_secret=os.environ.get(args.proxy_secret_env) if args.proxy_secret_header else None,
        trusted_proxies=proxy_networks(args.trusted_proxy),
        allowed_hosts=frozenset([*args.allowed_host, *_named(args.host)]),
    )
    webhooks = _webhooks(args) if args.webhook_url else None
    with _open(args) as ledger:
        serve(
            ledger,
            settings,
            host=args.host,
            port=args.port,
            webhooks=webhooks,
            public_url=args.public_url,
        )
    return EXIT_OK


def _webhooks(args: argparse.Namespace, also: list[str] | None = None) -> Webhooks:
    """The receivers of ``--webhook-url``; ``also``: other addresses events will go to (dead
    letters replayed), which need the secret too if they take signed JSON."""
    from call4agents.controls.webhooks import Receiver, Webhooks

    receivers = [Receiver.parse(url) for url in args.webhook_url]
    secret = os.environ.get(args.webhook_secret_env, "")
    # Only the signed JSON events need the shared secret; Slack and email do not check one.
    signed = [*(r.url for r in receivers if r.style == "json"), *(also or [])]
    if not secret and any(u.startswith(("http://", "https://")) for u in signed):
        raise ConfigurationError(
            f"webhooks need an HMAC secret in ${args.webhook_secret_env}: set it to a long random "
            "value the receiver also knows"
        )
    return Webhooks(receivers, secret.encode())


def cmd_webhooks(args: argparse.Namespace) -> int:
    """Dead letters: the webhook events given up on, listed, or posted again with --replay."""
    from call4agents.controls.webhooks import Receiver, replay
    from call4agents.storage import dead_letters

    if (args.webhook_url or args.to) and not args.replay:
        raise ConfigurationError("--webhook-url and --to only go with --replay")
    with _open(args) as ledger:
        letters = dead_letters.waiting(ledger.store, limit=1000)
        if not args.replay:
            if args.json:
                _print_json([dataclasses.asdict(d) for d in letters])
            elif not letters:
                print("No webhook events given up on.")
            else:
                now = time.time()
                rows = [[str(d.id), ago(d.created_at, now), d.receiver, d.error] for d in letters]
                print(_table(["id", "given up", "receiver", "why"], rows))
            return EXIT_OK
        if args.to:
            Receiver.parse(args.to)  # a clear error before anything is sent
        targets = [args.to] if args.to else [d.receiver for d in letters]
        done = replay(ledger, _webhooks(args, targets), receiver=args.to)
    if args.json:
        _print_json([{"id": r.letter.id, "delivered": r.delivered} for r in done])
    else:
        sent = sum(r.delivered for r in done)
        print(f"Replayed {sent} of {len(done)} dead letter(s); the rest stay for a later replay.")
    return EXIT_OK if all(r.delivered for r in done) else EXIT_FAILED


def _named(host: str) -> list[str]:
    """The listen address, when it is one a browser can name (not 0.0.0.0 or ::)."""
    return [] if host in ("0.0.0.0", "::", "") else [host]  # noqa: S104 - compared, not bound


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
