"""Serving the console: refuse an open address without a proxy, print the address, run."""

from __future__ import annotations

import gc
import sys

import uvicorn
from starlette.applications import Starlette

from call4agents import Ledger
from call4agents.controls.webhooks import Webhooks
from call4agents.model.errors import ConfigurationError

from ._app import create_app
from ._auth import ConsoleSettings, check_listen
from ._hooks import Notifier


def listening(host: str, port: int) -> str:
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/"


def address(host: str, port: int, settings: ConsoleSettings) -> str:
    return listening(host, port) + (f"?token={settings.token}" if settings.token else "")


def app_to_serve(ledger: Ledger, settings: ConsoleSettings) -> Starlette:
    """The app as ``serve`` runs it. Everything loaded by then (the ledger, SQLAlchemy, the
    driver, the app) lives as long as the server, so it is set aside from the garbage
    collector (``gc.freeze``): a page that reads thousands of tickets or runs makes enough
    short-lived rows to start several full collections, and each walked all of it, ~40 ms a
    time, where it now takes under a millisecond."""
    app = create_app(ledger, settings)
    gc.freeze()
    return app


def serve(
    ledger: Ledger,
    settings: ConsoleSettings,
    *,
    host: str,
    port: int,
    webhooks: Webhooks | None = None,
    public_url: str | None = None,
) -> None:
    """Run the console until interrupted; prints the address to open (with its token).
    Notifications link to ``public_url`` (by default the address it listens on)."""
    try:
        check_listen(host, settings)
    except ValueError as exc:
        raise ConfigurationError(str(exc)) from exc
    links = public_url or listening(host, port)
    notifier = Notifier(ledger, webhooks, links) if webhooks else None
    if notifier is not None:
        notifier.start()
    mode = (
        f"signed-in users from the {settings.user_header} header"
        if settings.user_header
        else f"decisions recorded as {settings.operator}"
    )
    print(f"Call4Agents console for {ledger.url} ({mode})", file=sys.stderr)
    print(f"Open {address(host, port, settings)}", flush=True)
    try:
        uvicorn.run(
            app_to_serve(ledger, settings),
            host=host,
            port=port,
            log_level="warning",
            access_log=False,
        )
    finally:
        if notifier is not None:
            notifier.stop()
