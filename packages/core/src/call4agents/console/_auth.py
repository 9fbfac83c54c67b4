"""Who is asking, and may they decide: the access token or an SSO proxy's header, and CSRF.

Token mode (the default, loopback only): a random token printed at start is accepted once in the
URL, then kept in an HttpOnly cookie; every decision is recorded under the operator name the
console was started with. Header mode: an SSO proxy in front of the console names the signed-in
person in a header it sets. Anyone who can reach the console can send that header too, so it is
believed only from the proxy: a request must carry the proxy's shared secret header, or come from
one of the proxy addresses the console was given (both, when both are set).

In both modes a request must name the console by one of its own host names: a page on another
site whose name was pointed at 127.0.0.1 (DNS rebinding) is refused before anything is read.
Names are compared as people mean them: case-folded after Unicode NFKC normalization, so
``Bob``, ``bob`` and a full-width ``ｂｏｂ`` are one user. Letters of other scripts stay other
letters: ``bоb`` with a Cyrillic ``о`` is not ``bob``, and wherever it is shown its mixed scripts
are said (``shown_name``), so nobody reads it as the look-alike. A request that repeats the user
or role header is refused: a proxy that adds its header to the client's instead of replacing it
would otherwise let the client's own value through.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import secrets
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from starlette.requests import Request

from call4agents.model.errors import ConfigurationError

COOKIE = "c4a_console"
READ_ONLY_ROLES = frozenset(("read-only", "readonly", "viewer"))
# The names a console on loopback always answers to, and that count as loopback to listen on.
LOCAL_HOSTS = frozenset(("127.0.0.1", "localhost", "::1"))

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def fold(name: str) -> str:
    """A user or role name as compared: NFKC-normalized, case-folded, outer spaces dropped."""
    return unicodedata.normalize("NFKC", name).strip().casefold()


# Scripts people write one name in together: a Japanese name mixes kanji and kana.
_ONE_SCRIPT = {"HIRAGANA": "CJK", "KATAKANA": "CJK", "HANGUL": "CJK"}


def _script(letter: str) -> str:
    """A letter's script, as the first word of its Unicode name says (LATIN, CYRILLIC...)."""
    first = unicodedata.name(letter, "UNKNOWN").split(" ")[0]
    return _ONE_SCRIPT.get(first, first)


def shown_name(name: str) -> str:
    """A name as pages show it: as it is, and when its letters come from several scripts, which
    letters are foreign to the rest (``bоb (mixed scripts: о is Cyrillic)``), so a look-alike of
    another user's name never passes for it."""
    letters = [c for c in name if c.isalpha()]
    scripts = [_script(c) for c in letters]
    if len(set(scripts)) < 2:
        return name
    main = max(set(scripts), key=lambda s: (scripts.count(s), s == "LATIN"))
    foreign = dict.fromkeys(
        f"{c} is {script.title()}"
        for c, script in zip(letters, scripts, strict=True)
        if script != main
    )
    return f"{name} (mixed scripts: {', '.join(foreign)})"


def host_name(host: str) -> str:
    """A Host header or listen address as compared: no port, no brackets, no trailing dot."""
    host = host.strip().lower()
    if host.startswith("["):  # [::1]:8470
        return host[1:].partition("]")[0]
    if host.count(":") == 1:  # name:port; a bare IPv6 address has several colons
        host = host.partition(":")[0]
    return host.rstrip(".")


def proxy_networks(addresses: Iterable[str]) -> tuple[Network, ...]:
    """``--trusted-proxy`` values (an address or a CIDR range), or ConfigurationError."""
    found: list[Network] = []
    for address in addresses:
        try:
            found.append(ipaddress.ip_network(address.strip(), strict=False))
        except ValueError as exc:
            raise ConfigurationError(
                f"--trusted-proxy {address!r} is not an IP address or range (e.g. 10.0.0.5 or "
                "10.0.0.0/24)"
            ) from exc
    return tuple(found)


@dataclass(frozen=True)
class ConsoleSettings:
    """How the console authenticates and who may decide (``call4agents console`` builds it)."""

    operator: str  # token mode: the name decisions are recorded under
    token: str | None = None  # token mode when set; None in header mode
    user_header: str | None = None  # header mode: the SSO proxy's header naming the user
    role_header: str | None = None  # a header whose value "read-only"/"viewer" makes one so
    read_only: bool = False  # nobody decides
    read_only_users: frozenset[str] = frozenset()  # compared folded (see ``fold``)
    csrf_key: bytes = field(default_factory=lambda: secrets.token_bytes(32))
    # Header mode believes the user header only from the proxy: its shared secret in this
    # header, or a connection from one of these networks.
    proxy_secret_header: str | None = None
    proxy_secret: str | None = None
    trusted_proxies: tuple[Network, ...] = ()
    # Host names besides the loopback ones that requests may name (the proxy's public name).
    allowed_hosts: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        folded = frozenset(fold(n) for n in self.read_only_users if fold(n))
        object.__setattr__(self, "read_only_users", folded)
        hosts = frozenset(host_name(h) for h in self.allowed_hosts if h.strip())
        object.__setattr__(self, "allowed_hosts", LOCAL_HOSTS | hosts)
        if (self.proxy_secret_header is None) != (not self.proxy_secret):
            raise ConfigurationError(
                "--proxy-secret-header needs the secret's value ($CALL4AGENTS_PROXY_SECRET), and "
                "the secret needs the header the proxy sends it in"
            )
        if self.user_header is not None and not (self.proxy_secret or self.trusted_proxies):
            raise ConfigurationError(
                f"--user-header {self.user_header} would believe anyone who can reach the "
                "console: name what only the proxy has, --proxy-secret-header NAME (the secret "
                "in $CALL4AGENTS_PROXY_SECRET) or --trusted-proxy ADDRESS (repeatable)"
            )


@dataclass(frozen=True)
class Viewer:
    name: str
    can_decide: bool
    session: str  # what the CSRF token is bound to

    @property
    def role(self) -> str:
        return "operator" if self.can_decide else "read-only"


class Refused(Exception):
    """A request the console will not serve: its status and one line saying why."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def is_loopback(host: str) -> bool:
    if host in LOCAL_HOSTS:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_listen(host: str, settings: ConsoleSettings) -> None:
    """Only loopback, unless a proxy in front authenticates the people using it."""
    if not is_loopback(host) and settings.user_header is None:
        raise ValueError(
            f"refusing to listen on {host}: the console serves other addresses only behind an "
            "SSO proxy that names the user (--user-header NAME); without one keep --host 127.0.0.1"
        )


def check_host(given: str, settings: ConsoleSettings) -> None:
    """The request names this console (DNS rebinding: a foreign name pointed at our address)."""
    if host_name(given) not in settings.allowed_hosts:
        raise Refused(
            421,
            f"this console does not answer to the host name {given!r}: open it by the address "
            "it printed, or start it with --allowed-host NAME for the name a proxy forwards",
        )


def check_proxy(headers: Mapping[str, str], client: str | None, settings: ConsoleSettings) -> None:
    """In header mode, the request came through the proxy: its secret, its address, or both."""
    if settings.user_header is None:
        return
    if settings.proxy_secret_header is not None and settings.proxy_secret:
        given = headers.get(settings.proxy_secret_header, "")
        if not same_secret(given, settings.proxy_secret):
            raise Refused(401, "this request did not come through the console's sign-in proxy")
    if settings.trusted_proxies and not _from_proxy(client, settings.trusted_proxies):
        raise Refused(401, "this request did not come from the console's sign-in proxy")


def same_secret(given: str, expected: str) -> bool:
    """Whether a token, cookie or CSRF value is the expected one, in constant time. Compared as
    UTF-8 bytes: ``hmac.compare_digest`` refuses two strings beyond ASCII with a TypeError, and
    what a client sends may hold any letter."""
    return hmac.compare_digest(
        given.encode("utf-8", "surrogatepass"), expected.encode("utf-8", "surrogatepass")
    )


def _from_proxy(client: str | None, networks: tuple[Network, ...]) -> bool:
    try:
        address = ipaddress.ip_address(client or "")
    except ValueError:
        return False
    return any(address in network for network in networks)


def viewer(request: Request, settings: ConsoleSettings) -> Viewer:
    """The signed-in person, or Refused(401). The proxy was checked before (``check_proxy``)."""
    if settings.user_header is not None:
        name = unicodedata.normalize("NFKC", _header(request, settings.user_header)).strip()
        if not name:
            raise Refused(401, f"no signed-in user: the {settings.user_header} header is missing")
        if any(unicodedata.category(c)[0] == "C" for c in name):
            raise Refused(400, f"the {settings.user_header} header holds control characters")
        session = fold(name)
    else:
        given = request.cookies.get(COOKIE) or _bearer(request)
        if not given or not settings.token or not same_secret(given, settings.token):
            raise Refused(
                401,
                "sign in with the address `call4agents console` printed (it holds the access "
                "token)",
            )
        name, session = settings.operator, hashlib.sha256(given.encode()).hexdigest()
    role = _header(request, settings.role_header) if settings.role_header else ""
    read_only = (
        settings.read_only
        or fold(name) in settings.read_only_users
        or fold(role) in READ_ONLY_ROLES
    )
    return Viewer(name=name, can_decide=not read_only, session=session)


def _header(request: Request, name: str) -> str:
    """A header's text: proxies send names as UTF-8 bytes, which Starlette reads as Latin-1. A
    header given twice is refused, whichever copy the proxy set."""
    values = request.headers.getlist(name)
    if len(values) > 1:
        raise Refused(
            400,
            f"the {name} header was sent {len(values)} times: the sign-in proxy must replace it, "
            "not add to what the client sent; nothing was done",
        )
    value = values[0] if values else ""
    try:
        return value.encode("latin-1").decode("utf-8")
    except UnicodeError:
        return value


def _bearer(request: Request) -> str | None:
    scheme, _, value = request.headers.get("authorization", "").partition(" ")
    return value.strip() if scheme.lower() == "bearer" and value.strip() else None


def csrf_token(who: Viewer, settings: ConsoleSettings) -> str:
    return hmac.new(settings.csrf_key, b"csrf|" + who.session.encode(), "sha256").hexdigest()


def check_csrf(given: str | None, who: Viewer, settings: ConsoleSettings) -> None:
    if not given or not same_secret(given, csrf_token(who, settings)):
        raise Refused(
            403,
            "this form has no valid CSRF token (it did not come from this console's page, or "
            "the console restarted): reload the page and try again; nothing was changed",
        )


def require_decider(who: Viewer) -> None:
    if not who.can_decide:
        raise Refused(403, f"{who.name} has read-only access: nothing was changed")
