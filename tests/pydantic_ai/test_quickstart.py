"""The Pydantic AI rows of `call4agents quickstart`, measured from real SIGKILLed children."""

from __future__ import annotations

from pathlib import Path

from call4agents_pydantic_ai.quickstart import LEDGER, PLAIN, scenario
from tests.conftest import Target


def test_rows_count_emails_from_killed_and_resumed_agents(target: Target, tmp_path: Path) -> None:
    url = target.url
    if target.schema:  # the quickstart takes a bare URL: point its search_path at the schema
        target.open().close()
        url += f"?options=-csearch_path%3D{target.schema}"
    rows = scenario(tmp_path, url)
    assert [(label, emails) for label, emails, _ in rows] == [(PLAIN, 2), (LEDGER, 1)]
    assert "recorded result" in rows[1][2]
