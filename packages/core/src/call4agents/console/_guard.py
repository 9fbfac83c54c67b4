"""Before any page: the request names this console, and in header mode came through the proxy.

An ASGI layer around the whole app, so the static files, the event stream and a 404 are covered
as well as the pages.
"""

from __future__ import annotations

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from ._auth import ConsoleSettings, Refused, check_host, check_proxy
from ._web import error_page


class Guard:
    def __init__(self, app: ASGIApp, settings: ConsoleSettings) -> None:
        self._app, self._settings = app, settings

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = Headers(scope=scope)
            client = scope.get("client")
            try:
                check_host(headers.get("host", ""), self._settings)
                check_proxy(headers, client[0] if client else None, self._settings)
            except Refused as refused:
                await error_page(refused.status, refused.message, None)(scope, receive, send)
                return
        await self._app(scope, receive, send)
