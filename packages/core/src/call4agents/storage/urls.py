"""How a ledger URL is read: the default and ``$CALL4AGENTS_URL``, libpq's host lists (IPv6
included), URLs split inside an unencoded password, and the password masked in messages."""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Sequence
from urllib.parse import quote, unquote

from sqlalchemy import Engine
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

from call4agents.model.errors import ConfigurationError

DEFAULT_URL = "sqlite:///.c4a/ledger.db"


def given_url(url: str | None) -> str:
    """The ledger URL to open: ``url``, else ``$CALL4AGENTS_URL``, else the default; a bare path
    means an SQLite file."""
    raw = url or os.environ.get("CALL4AGENTS_URL") or DEFAULT_URL
    return raw if "://" in raw else "sqlite:///" + raw


# What a parsed host may look like: names or IPv4 addresses (a comma-separated list for libpq's
# several hosts), or empty (a socket given in ?host=). Anything else means the URL was split in
# the wrong place, nearly always at an "@" of a password that was not percent-encoded; the pieces
# of that password would then show in every message.
_HOST = re.compile(r"[A-Za-z0-9._~%,-]*")
_QUERY_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ENCODE_HINT = (
    "if the password holds characters such as @ : / ? # [ ] %, percent-encode it "
    "(Python: urllib.parse.quote(password, safe=''))"
)


# libpq's host list in the netloc (``//user@h1:5432,[::1]:5433/db``), which SQLAlchemy reads as
# one host with a port it cannot parse: the user's part (up to the last "@" before the path),
# the hosts, and the rest.
_NETLOC_HOSTS = re.compile(
    r"(?P<scheme>postgres(?:ql)?(?:\+psycopg)?)://(?P<user>[^/?#]*@)?"
    r"(?P<hosts>[^/?#@]*)(?P<path>/[^?#]*)?(?:\?(?P<query>[^#]*))?"
)
_NAMED_HOST = re.compile(r"(?P<host>[A-Za-z0-9._~%-]+)(?::(?P<port>[0-9]+))?")
_BRACKETED_HOST = re.compile(r"\[(?P<host>[^\[\]]*)\](?::(?P<port>[0-9]+))?")
_HOST_FORMS = (
    "give each host as name or name:port, an IPv6 address in brackets ([::1] or [::1]:5432), "
    "separated by commas: postgresql+psycopg://user@[::1]:5432,127.0.0.1:5432/db, or "
    "?host=[::1]:5432&host=127.0.0.1:5432"
)


def _is_ipv6(text: str) -> bool:
    try:
        ipaddress.IPv6Address(text)
    except ValueError:
        return False
    return True


def _host_entry(entry: str, *, bare_ipv6: bool = False) -> tuple[str, str]:
    """One host of libpq's list as ``(host, port)``, the port "" for the server's default. An
    IPv6 address has colons of its own, so it goes in brackets when a port may follow (the URL's
    netloc, and SQLAlchemy's ``?host=h:port``); ``bare_ipv6``: where no port follows, bare."""
    found = _BRACKETED_HOST.fullmatch(entry)
    if found is not None and _is_ipv6(found["host"]):
        return found["host"], found["port"] or ""
    if found is not None:
        raise ConfigurationError(
            f"cannot read the host {entry!r} in the ledger URL: brackets hold an IPv6 address, "
            f"and {found['host']!r} is none; {_HOST_FORMS}"
        )
    if "[" not in entry and "]" not in entry:
        if bare_ipv6 and _is_ipv6(entry):
            return entry, ""
        found = _NAMED_HOST.fullmatch(entry)
        if found is not None:
            return found["host"], found["port"] or ""
    raise ConfigurationError(f"cannot read the host {entry!r} in the ledger URL: {_HOST_FORMS}")


def _host_query(entries: Sequence[tuple[str, str]]) -> str:
    """Hosts and ports in the query form SQLAlchemy hands to libpq untouched, IPv6 included:
    ``host=h1,h2&port=p1,p2`` (libpq reads an empty port as its default)."""
    hosts = "host=" + ",".join(quote(h, safe=":%") for h, _ in entries)
    ports = [p for _, p in entries]
    return hosts + ("&port=" + ",".join(ports) if any(ports) else "")


def _hosts_to_query(raw: str) -> str:
    """A URL naming several hosts in its netloc, or an IPv6 one among hosts in its query,
    rewritten to name them in the query's ``host=h1,h2&port=p1,p2``, the form SQLAlchemy's
    psycopg dialect hands to libpq whole (it splits ``?host=h:port`` at every colon and cannot
    read ``h1,h2`` in the netloc). A single host in the netloc stays there; brackets out of
    place fail in one line."""
    found = _NETLOC_HOSTS.fullmatch(raw)
    if found is None or "@" in raw[found.end("hosts") :]:
        return raw  # not PostgreSQL's, or split inside a password: parse_url judges it
    netloc, query = found["hosts"], found["query"] or ""
    named = [_host_entry(h) for h in netloc.split(",")] if netloc else []
    pieces = [p for p in query.split("&") if p]
    given = [unquote(p.partition("=")[2]) for p in pieces if p.partition("=")[0] == "host"]
    if len(named) <= 1 and not any("[" in h or "]" in h or h.count(":") > 1 for h in given):
        return raw  # what SQLAlchemy reads as it is
    if named and given:
        raise ConfigurationError(
            "the ledger URL names hosts both before the path and in ?host=: name them in one place"
        )
    if given:
        named = [_host_entry(h, bare_ipv6=True) for g in given for h in g.split(",")]
        if any(p.partition("=")[0] == "port" for p in pieces) and any(p for _, p in named):
            raise ConfigurationError(
                "the ledger URL gives ports both after its hosts and in ?port=: give them in one "
                "place"
            )
        pieces = [p for p in pieces if p.partition("=")[0] != "host"]
    rest = "".join("&" + p for p in pieces)
    head = f"{found['scheme']}://{found['user'] or ''}{found['path'] or '/'}"
    return f"{head}?{_host_query(named)}{rest}"


def parse_url(url: str | None) -> URL:
    raw = _hosts_to_query(given_url(url))
    try:
        parsed = make_url(raw)
    except (ArgumentError, ValueError) as exc:
        raise ConfigurationError(
            f"cannot read the ledger URL {safe_url(raw)!r}: use sqlite:///path/to/ledger.db or "
            "postgresql+psycopg://user:password@host/db"
        ) from exc
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    if parsed.drivername not in ("sqlite", "sqlite+pysqlite", "postgresql+psycopg"):
        raise ConfigurationError(
            f"unsupported ledger URL scheme {parsed.drivername!r}: use sqlite:///path/to/ledger.db "
            "or postgresql+psycopg://user:password@host/db"
        )
    if parsed.drivername == "postgresql+psycopg":
        _check_split(parsed)
    elif parsed.host:
        _refuse_sqlite_host(parsed.host, parsed.database)
    return parsed


def _refuse_sqlite_host(host: str, database: str | None) -> None:
    """``sqlite://x.db`` puts the file name where a host goes: SQLite has no hosts, so this is a
    slash short of ``sqlite:///x.db``, never an in-memory ledger."""
    meant = host + ("/" + database if database else "")
    raise ConfigurationError(
        f"sqlite://{meant} has two slashes, so {host!r} reads as a host name: for the file "
        f"{meant} write sqlite:///{meant} (three slashes; four for an absolute path, "
        "sqlite:////var/lib/ledger.db)"
    )


def _check_split(url: URL) -> None:
    """Refuse a PostgreSQL URL that was cut apart inside its password, without echoing it."""
    host_ok = url.host is None or bool(_HOST.fullmatch(url.host)) or ":" in url.host  # IPv6
    odd_key = any(not _QUERY_KEY.fullmatch(k) for k in url.query)
    if not host_ok or odd_key or "@" in (url.database or ""):
        raise ConfigurationError(
            "cannot read the PostgreSQL ledger URL: it does not split into user, password, host "
            f"and database as expected; {_ENCODE_HINT}. (The URL is not shown, as it may hold "
            "the password.)"
        )


def safe_url(url: str | URL) -> str:
    """The URL with its password masked, for messages and `doctor`."""
    if isinstance(url, URL):
        return url.render_as_string(hide_password=True)
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        # Up to the last "@": an unencoded password may itself hold "@" or "/".
        return re.sub(r"//.*@", "//***@", url)


def engine_url(engine: Engine | None, url: str | None) -> URL:
    """The ledger's URL: ``url`` read (``parse_url``), or that of the user's own ``engine``,
    which must be a PostgreSQL one on psycopg and comes without a ``url``."""
    if engine is None:
        return parse_url(url)
    if url is not None:
        raise ConfigurationError("give the ledger a url or an engine, not both")
    if not isinstance(engine, Engine) or engine.dialect.name != "postgresql":
        raise ConfigurationError(
            "engine= takes a SQLAlchemy engine of a PostgreSQL database "
            "(create_engine('postgresql+psycopg://...')); an SQLite ledger opens its own file"
        )
    if engine.dialect.driver != "psycopg":
        raise ConfigurationError(
            f"engine= uses the {engine.dialect.driver} driver: the ledger needs psycopg "
            "(postgresql+psycopg://...)"
        )
    return engine.url
