"""Turning OpenTelemetry on and off: the layer ``_otel`` builds, installed into the engine's hook.

OpenTelemetry is on by default when ``opentelemetry`` is importable: like any library
instrumented with the OpenTelemetry API, it does nothing until the application installs an SDK.
Turn it off with ``c4a.init(otel=False)`` or ``CALL4AGENTS_OTEL=0``; ``otel=True`` insists.
The package imports this module, so the automatic default is in place before the first action.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import threading
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from call4agents.engine.observe import PASS_THROUGH, AInner, Inner, Layer, install, installed
from call4agents.model.errors import ConfigurationError

if TYPE_CHECKING:
    from call4agents.engine.action import Action

T = TypeVar("T")
_lazy_lock = threading.Lock()


@functools.cache
def otel_available() -> bool:
    """Whether the OpenTelemetry API can be imported (looked up once per process)."""
    try:
        return importlib.util.find_spec("opentelemetry") is not None
    except (ImportError, ValueError):
        return False


def configure(
    otel: bool | None = None,
    *,
    record_args: bool = False,
    tracer_provider: Any = None,
    meter_provider: Any = None,
) -> None:
    """Turn OpenTelemetry on (True), off (False) or back to automatic (None).

    ``record_args=True`` puts arguments and results on spans (they may hold personal data).
    Providers default to the global ones, so spans go wherever the application sends them.
    """
    if otel is False:
        install("otel", None)
        return
    if not otel_available():
        if otel:
            raise ConfigurationError(
                "otel=True needs OpenTelemetry, which is not installed: "
                'pip install "call4agents-core[otel]"'
            )
        install("otel", None)
        return
    if otel is None and os.environ.get("CALL4AGENTS_OTEL") == "0" and record_args is False:
        install("otel", None)
        return
    from ._otel import OtelLayer

    current = installed("otel")
    if isinstance(current, OtelLayer) and current.providers == (tracer_provider, meter_provider):
        # The same providers: keep the instruments (a second set would double every gauge).
        current.record_args = record_args
        return
    install("otel", OtelLayer(record_args, tracer_provider, meter_provider))


class _Lazy(Layer):
    """The automatic default: imports OpenTelemetry at the first action, not at import time."""

    def resolved(self) -> Layer:
        with _lazy_lock:  # two first actions at once must not build two sets of instruments
            if installed("otel") is self:
                try:
                    configure(None)
                except ImportError:  # found but broken: stay out of the way
                    install("otel", None)
        # None: OpenTelemetry is off; the base layer passes everything straight through.
        return installed("otel") or PASS_THROUGH

    # The run and step events reach the real layer through ``resolved`` (observe.telemetry).
    def perform(self, action: Action, call: Callable[[], T], inner: Inner[T]) -> T:
        return self.resolved().perform(action, call, inner)

    async def aperform(
        self, action: Action, call: Callable[[], Awaitable[T]], inner: AInner[T]
    ) -> T:
        return await self.resolved().aperform(action, call, inner)


def _auto() -> None:
    if os.environ.get("CALL4AGENTS_OTEL") != "0" and otel_available():
        install("otel", _Lazy())


_auto()
