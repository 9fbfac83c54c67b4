"""Kill an Agents SDK agent right after it sent an email, then run the job again.

Real child processes: each is SIGKILLed after the tool returned and before the SDK saved the turn
to its session; a fresh process then resumes. Emails are counted in an outbox file.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from call4agents_openai_agents.quickstart import scenario

with tempfile.TemporaryDirectory(prefix="c4a-oa-example-") as tmp:
    rows = scenario(Path(tmp), f"sqlite:///{Path(tmp) / 'ledger.db'}")
for label, emails, what in rows:
    print(f"{label}: {emails} email(s), {what}")
