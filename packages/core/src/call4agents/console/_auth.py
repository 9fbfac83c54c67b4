"""Who is asking, and may they decide: the access token or an SSO proxy's header, and CSRF.

Token mode (the default, loopback only): a random token printed at start is accepted once in the
URL, then kept in an HttpOnly cookie; every decision is recorded under the operator name the
console was started with. Header mode: an SSO proxy in front of the console names the signed-in
person in a header it sets; the console must then be reachable only through that proxy.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import secrets
from dataclasses import dataclass, field

from starlette.requests import Request

COOKIE = "c4a_console"
LOOPBACK_NAMES = ("localhost",)
READ_ONLY_ROLES = ("read-only", "readonly", "viewer")


@dataclass(frozen=True)
class ConsoleSettings:
    """How the console authenticates and who may decide (``call4agents console`` builds it)."""

    operator: str  # token mode: the name decisions are recorded under
    token: str | None = None  # token mode when set; None in header mode
    user_header: str | None = None  # header mode: the SSO proxy's header naming the user
    role_header: str | None = None  # a header whose value "read-only"/"viewer" makes one so
    read_only: bool = False  # nobody decides
    read_only_users: frozenset[str] = frozenset()
    csrf_key: bytes = field(default_factory=lambda: secrets.token_bytes(32))
    undo_modules: tuple[str, ...] = ()


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
    if host in LOOPBACK_NAMES:
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


def viewer(request: Request, settings: ConsoleSettings) -> Viewer:
    """The signed-in person, or Refused(401)."""
    if settings.user_header is not None:
        name = (request.headers.get(settings.user_header) or "").strip()
        if not name:
            raise Refused(401, f"no signed-in user: the {settings.user_header} header is missing")
        session = name
    else:
        given = request.cookies.get(COOKIE) or _bearer(request)
        if not given or not settings.token or not hmac.compare_digest(given, settings.token):
            raise Refused(
                401,
                "sign in with the address `call4agents console` printed (it holds the access "
                "token)",
            )
        name, session = settings.operator, hashlib.sha256(given.encode()).hexdigest()
    role = (request.headers.get(settings.role_header) or "") if settings.role_header else ""
    read_only = (
        settings.read_only
        or name in settings.read_only_users
        or role.strip().lower() in READ_ONLY_ROLES
    )
    return Viewer(name=name, can_decide=not read_only, session=session)


def _bearer(request: Request) -> str | None:
    scheme, _, value = request.headers.get("authorization", "").partition(" ")
    return value.strip() if scheme.lower() == "bearer" and value.strip() else None


def csrf_token(who: Viewer, settings: ConsoleSettings) -> str:
    return hmac.new(settings.csrf_key, b"csrf|" + who.session.encode(), "sha256").hexdigest()


def check_csrf(given: str | None, who: Viewer, settings: ConsoleSettings) -> None:
    if not given or not hmac.compare_digest(given, csrf_token(who, settings)):
        raise Refused(
            403,
            "this form has no valid CSRF token (it did not come from this console's page, or "
            "the console restarted): reload the page and try again; nothing was changed",
        )


def require_decider(who: Viewer) -> None:
    if not who.can_decide:
        raise Refused(403, f"{who.name} has read-only access: nothing was changed")
