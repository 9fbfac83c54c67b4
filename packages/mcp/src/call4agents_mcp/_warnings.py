"""The MCP integration's warnings: a ``Call4AgentsWarning``, given once, never an error.

A server that runs a call without the ledger (a keyless call from a caller it cannot name, a
``scope="call"`` tool called without a key) says so once per process and topic, through Python's
``warnings``, so the operator filters it by its category like any other warning.

Where a filter turns warnings into exceptions (``-W error``, pytest's ``filterwarnings = error``)
the warning is shown as a warning all the same, through ``warnings.showwarning`` (what Python
calls to show one; pytest's own recorder when a test runs): the call must never fail for it, and
the log is not the place either, since a suite asserting on its server's log records would see a
record the bare server never writes. ``ignore`` filters are honoured: nothing is shown.
"""

from __future__ import annotations

import inspect
import threading
import warnings

from call4agents.integration import Call4AgentsWarning

_given: set[str] = set()
_lock = threading.Lock()  # calls are keyed in worker threads: two may warn at once


def warn_once(topic: str, message: str) -> None:
    """Warn ``message`` once per process for ``topic``; never raise."""
    with _lock:
        if topic in _given:
            return
        _given.add(topic)
    try:
        warnings.warn(message, Call4AgentsWarning, stacklevel=2)
    except Warning as promoted:
        # A filter promoted it to an error: show it as the warning it is, where it was given.
        frame = inspect.currentframe()
        caller = frame.f_back if frame is not None else None
        filename, lineno = (
            (__file__, 0) if caller is None else (caller.f_code.co_filename, caller.f_lineno)
        )
        warnings.showwarning(str(promoted), Call4AgentsWarning, filename, lineno)
