"""The MCP rows of `call4agents quickstart`, measured from real processes."""

from __future__ import annotations

from pathlib import Path

import pytest

from call4agents_mcp.quickstart import scenario
from tests.conftest import Target


@pytest.mark.slow
def test_quickstart_rows(sqlite_target: Target, tmp_path: Path) -> None:
    rows = scenario(tmp_path, sqlite_target.url)
    assert rows == [
        (
            "MCP client, response lost then retried, without Call4Agents",
            2,
            "the retry sent it again",
        ),
        (
            "MCP client, response lost then retried, with Call4Agents",
            1,
            "the retry got the first result",
        ),
    ]
