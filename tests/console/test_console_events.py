"""The console's event stream (``/api/events``) from a real ``call4agents console`` process.

On PostgreSQL it carries the ledger's news as it commits (LISTEN/NOTIFY): a ticket opened, an
action fallen in doubt; on SQLite it answers 204 and pages poll instead.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

import call4agents as c4a
from tests.conftest import Target
from tests.console.browser import console
from tests.console.helpers import make_in_doubt, open_ticket

pytestmark = pytest.mark.slow


def _client(address: str) -> httpx.Client:
    token = parse_qs(urlsplit(address).query)["token"][0]
    base = address.split("?")[0]
    return httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=20)


def _events(lines: Iterator[str]) -> Iterator[tuple[str, dict[str, Any]]]:
    event = None
    for line in lines:
        if line.startswith("event: "):
            event = line[len("event: ") :]
        elif line.startswith("data: ") and event is not None:
            yield event, json.loads(line[len("data: ") :])
            event = None


def test_the_stream_carries_new_tickets_and_in_doubt_actions(pg_target: Target) -> None:
    c4a.init(pg_target.open())
    with (
        console(pg_target, "--operator", "ann") as address,
        _client(address) as client,
        client.stream("GET", "/api/events") as stream,
    ):
        assert stream.status_code == 200
        assert stream.headers["content-type"].startswith("text/event-stream")
        assert stream.headers["cache-control"] == "no-store"
        events = _events(stream.iter_lines())
        assert next(events) == ("ready", {"what": "ready", "id": ""})
        request = open_ticket("pushed-1")
        assert next(events) == ("news", {"what": "ticket", "id": request.ticket})
        record = make_in_doubt("pushed-2")
        assert next(events) == ("news", {"what": "in_doubt", "id": record.key})


def test_sqlite_has_no_stream_and_a_stranger_gets_none(sqlite_target: Target) -> None:
    sqlite_target.open()
    with console(sqlite_target, "--operator", "ann") as address, _client(address) as client:
        assert client.get("/api/events").status_code == 204
        assert httpx.get(address.split("?")[0] + "api/events").status_code == 401
