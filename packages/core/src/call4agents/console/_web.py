"""The plumbing every page shares: authentication, CSRF, errors as pages, security headers."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from importlib import resources
from typing import Any
from urllib.parse import parse_qsl, urlencode

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response

from call4agents.engine.approvals import ApprovalRequest
from call4agents.model.errors import Call4AgentsError
from call4agents.storage._db import DatabaseFault, database_failed

from ._auth import (
    COOKIE,
    ConsoleSettings,
    Refused,
    Viewer,
    check_csrf,
    csrf_token,
    require_decider,
    same_secret,
    viewer,
)
from ._render import render

# No script or style from anywhere but the console itself, no framing, no referrer (the first
# address holds the token).
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}
# No page or answer is cached: most show arguments, and all show who may decide what.
NO_STORE = {**SECURITY_HEADERS, "Cache-Control": "no-store"}
MAX_FORM_BYTES = 1_000_000
# Characters a filter in the address may hold: a run id, a tool name or a search fits many times
# over, and SQLite refuses a LIKE pattern past 50,000 bytes (it read as the ledger failing).
MAX_FILTER_CHARS = 1000
# Longer values some addresses carry that are no filter: the tickets a decision on ticked
# tickets returns with (at most 100 ids of 24 characters, comma-separated).
MAX_CHARS = {"done": 100 * 32, "refused": 100 * 32}
STATIC = {"console.css": "text/css", "console.js": "text/javascript"}


@dataclass(frozen=True)
class Ask:
    """One request as a page handler sees it: who, the query, the form (POST)."""

    who: Viewer
    query: dict[str, str]
    form: dict[str, str]
    path: dict[str, str]
    csrf: str


Handler = Callable[[Ask], Response]


def fingerprint(request: ApprovalRequest) -> str:
    """What a decision form carries besides the ticket id: the arguments the page showed."""
    shown = json.dumps(request.args, sort_keys=True, separators=(",", ":"), default=str)
    material = "|".join((request.ticket, request.key, request.args_digest or "", shown))
    return hashlib.sha256(material.encode()).hexdigest()


def decision_form(
    ask: Ask, back: str, *, then_next: bool = False, pick: bool = False
) -> dict[str, object]:
    """What a form that changes something (a decision, a settlement, an undo) needs besides its
    subject: who decides, the CSRF token, and where to go back to; the one source of each."""
    return {
        "can_decide": ask.who.can_decide,
        "csrf": ask.csrf,
        "who": ask.who.name,
        "back": back,
        "then_next": then_next,
        "pick": pick,
    }


def page(
    template: str,
    who: Viewer | None,
    *,
    status: int = 200,
    live: bool = False,
    here: str = "",
    **context: Any,
) -> Response:
    """A page from its template, in the layout: who is signed in (no navigation for nobody),
    which link of the navigation is this page, whether its list takes live updates."""
    body = render(
        template,
        user=None if who is None else who.name,
        role="" if who is None else who.role,
        live=live,
        here=here,
        **context,
    )
    return HTMLResponse(body, status_code=status, headers=NO_STORE)


TITLES = {
    400: "Not accepted",
    401: "Sign in",
    403: "Not allowed",
    404: "Not found",
    405: "Not accepted",
    413: "Too large",
    421: "Wrong address",
}


def error_page(status: int, message: str, who: Viewer | None) -> Response:
    """A refusal in the console's own layout (``error.html``)."""
    title = TITLES.get(status, "Not done" if status < 500 else "Ledger unavailable")
    return page("error.html", who, status=status, title=title, message=message)


async def not_routed(request: Request, exc: Exception) -> Response:
    """An address the console has no page for (404) or a method it does not take (405)."""
    settings: ConsoleSettings = request.app.state.settings
    status = getattr(exc, "status_code", 404)
    try:
        who: Viewer | None = viewer(request, settings)
    except Refused:
        who = None
    if status == 405:
        return error_page(405, f"{request.method} is not taken at {request.url.path}", who)
    return error_page(404, f"the console has no page at {request.url.path}", who)


def endpoint(
    settings: ConsoleSettings, handler: Handler
) -> Callable[[Request], Awaitable[Response]]:
    """Wrap a page: sign-in, role and CSRF for POSTs (every one decides), errors as a page."""

    async def serve(request: Request) -> Response:
        who: Viewer | None = None
        try:
            if "token" in request.query_params:
                return _sign_in(request, settings)
            who = viewer(request, settings)
            form = await _form(request) if request.method == "POST" else {}
            if request.method == "POST":
                require_decider(who)  # a read-only user is told so, whatever the form holds
                check_csrf(form.get("csrf"), who, settings)
            ask = Ask(
                who=who,
                query=_query(request),
                form=form,
                path={k: str(v) for k, v in request.path_params.items()},
                csrf=csrf_token(who, settings),
            )
            return await run_in_threadpool(handler, ask)
        except Refused as refused:
            return error_page(refused.status, refused.message, who)
        except Call4AgentsError as exc:
            if isinstance(exc.__cause__, DatabaseFault):  # the database, not the request
                return error_page(503, f"{exc}; nothing was changed", who)
            return error_page(409, f"{exc} (nothing else was changed)", who)
        except DatabaseFault as exc:
            return error_page(503, str(database_failed(exc)), who)

    return serve


def _query(request: Request) -> dict[str, str]:
    """The address's filters, each refused (400) past MAX_FILTER_CHARS."""
    query = dict(request.query_params)
    for name, value in query.items():
        if len(value) > MAX_CHARS.get(name, MAX_FILTER_CHARS):
            raise Refused(
                400,
                f"the {name} filter is {len(value):,} characters long: at most "
                f"{MAX_CHARS.get(name, MAX_FILTER_CHARS):,}; shorten it (a part of a run id or "
                "tool name matches)",
            )
    return query


def _sign_in(request: Request, settings: ConsoleSettings) -> Response:
    """The token from the printed address becomes a cookie, and leaves the address bar."""
    given = request.query_params["token"]
    if not settings.token or not same_secret(given, settings.token):
        return error_page(
            401, "that access token is not this console's: use the printed address", None
        )
    rest = [(k, v) for k, v in parse_qsl(request.url.query) if k != "token"]
    target = request.url.path + ("?" + urlencode(rest) if rest else "")
    response = redirect(target)
    response.set_cookie(COOKIE, given, httponly=True, samesite="strict", path="/")
    return response


async def _form(request: Request) -> dict[str, str]:
    kind = request.headers.get("content-type", "").split(";")[0].strip()
    if kind != "application/x-www-form-urlencoded":
        raise Refused(400, "send the form as application/x-www-form-urlencoded")
    body = await _body(request)
    try:
        return dict(parse_qsl(body.decode("utf-8"), keep_blank_values=True))
    except UnicodeDecodeError as exc:
        raise Refused(400, "the form is not valid UTF-8: nothing was changed") from exc


async def _body(request: Request) -> bytes:
    """The body, refused (413) as soon as it is known to pass the limit: a declared length over
    it is never read, and a chunked one is dropped at the chunk that passes it."""
    too_large = Refused(413, "the form is too large (over 1 MB): nothing was changed")
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_FORM_BYTES:
        raise too_large
    parts: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_FORM_BYTES:
            raise too_large
        parts.append(chunk)
    return b"".join(parts)


async def static(request: Request) -> Response:
    name = str(request.path_params["name"])
    if name not in STATIC:
        return Response("not found", status_code=404, headers=SECURITY_HEADERS)
    data = resources.files(__package__).joinpath("static").joinpath(name).read_bytes()
    headers = {**SECURITY_HEADERS, "Cache-Control": "max-age=300"}
    return Response(data, media_type=STATIC[name], headers=headers)


def json_response(value: Any) -> Response:
    return JSONResponse(value, headers=NO_STORE)


def redirect(target: str) -> Response:
    return RedirectResponse(target, status_code=303, headers=SECURITY_HEADERS)
