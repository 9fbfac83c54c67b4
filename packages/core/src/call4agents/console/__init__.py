"""The operator console: the approvals inbox, the in-doubt queue, runs and health, in a browser.

Needs the ``console`` extra (``pip install "call4agents-core[console]"``); start it with
``call4agents console``. Pages are rendered on the server from Jinja2 templates (``templates/``,
autoescaped) and work as plain HTML forms; a small script only adds live updates.
"""

from __future__ import annotations

try:
    import jinja2  # noqa: F401
    import starlette  # noqa: F401
    import uvicorn  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on what is installed
    raise ImportError(
        'the console needs its extra: pip install "call4agents-core[console]"'
    ) from exc

from ._app import create_app
from ._auth import ConsoleSettings, check_listen, proxy_networks
from ._serve import address, serve

__all__ = [
    "ConsoleSettings",
    "address",
    "check_listen",
    "create_app",
    "proxy_networks",
    "serve",
]
