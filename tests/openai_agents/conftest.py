"""Run ``async def`` tests of this folder in a fresh event loop each (no asyncio plugin needed)."""

from __future__ import annotations

import asyncio
import inspect

import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    test = pyfuncitem.obj
    if not inspect.iscoroutinefunction(test):
        return None
    names = inspect.signature(test).parameters
    asyncio.run(test(**{name: pyfuncitem.funcargs[name] for name in names}))
    return True
