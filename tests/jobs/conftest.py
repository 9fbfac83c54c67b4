"""Fixtures shared by the job tests: the session's Temporal dev server."""

from __future__ import annotations

from tests.jobs.temporal_server import temporal_server

__all__ = ["temporal_server"]  # a session fixture
