"""The console as an ASGI app over one ledger: routes to the pages."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from functools import partial

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.responses import Response
from starlette.routing import Route

from call4agents import Ledger

from . import _audit, _doubt, _health, _inbox, _runs, _tickets
from ._auth import ConsoleSettings
from ._events import LiveHub, events
from ._guard import Guard
from ._web import Ask, endpoint, not_routed, static

Page = Callable[[Ledger, Ask], Response]


def create_app(ledger: Ledger, settings: ConsoleSettings) -> Starlette:
    """The console's app; ``call4agents console`` serves it with uvicorn."""
    hub = LiveHub(ledger)

    def route(path: str, page: Page, *, post: bool = False) -> Route:
        handler = endpoint(settings, partial(page, ledger))
        return Route(path, handler, methods=["POST"] if post else ["GET"])

    routes = [
        route("/", _inbox.inbox),
        route("/approvals/bulk", _inbox.bulk_decide, post=True),
        route("/approvals/{ticket}", _tickets.ticket_page),
        route("/approvals/{ticket}", _tickets.decide, post=True),
        route("/doubt", _doubt.queue),
        route("/doubt/{key}", _doubt.settle, post=True),
        route("/runs", _runs.runs_list),
        route("/run", _runs.run_page),
        route("/run/undo", _runs.undo_confirm),
        route("/run/undo", _runs.undo, post=True),
        route("/audit", _audit.audit),
        route("/health", _health.health),
        route("/api/live", _health.live),
        route("/api/events", partial(events, hub)),
        Route("/static/{name}", static),
    ]

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        hub.close()

    app = Starlette(
        routes=routes,
        lifespan=lifespan,
        middleware=[Middleware(Guard, settings=settings)],
        exception_handlers={404: not_routed, 405: not_routed},
    )
    app.state.settings = settings
    return app
