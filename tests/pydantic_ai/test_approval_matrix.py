"""The approval matrix for Pydantic AI, in real worker processes on SQLite and PostgreSQL.

A saved message history is edited (the email now goes to mallory, same tool call id) before or
after a yes, the yes given in the ledger or through Pydantic AI's own answer (echoing the
metadata, or keyed by tool call id alone). The edited history is then continued once, again,
and by two workers at once: mallory is never emailed, and exactly one ticket waits for her.
Honest continuations email bob once; a later no through every channel wins over a yes not yet
spent. ``test_edited_history.py`` shows bare Pydantic AI emailing mallory in the same scenario.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from pydantic_ai.messages import ModelMessagesTypeAdapter

from call4agents.facade.cli import main as cli
from tests.conftest import Target, run_child
from tests.pydantic_ai.scripted import Outbox, child_env
from tests.pydantic_ai.test_approvals import _with_args

CHILD = Path(__file__).with_name("approval_child.py")
RUN = "ticket-9"  # the child's conversation id
MALLORY = {"to": "mallory@example.com", "body": "Your refund is approved"}
ROUNDS = (["w1"], ["w2"], ["w3", "w4"])  # resumed once, twice, then by two workers at once


class Workers:
    """The saved run of ``approval_child.py`` in one folder, and workers continuing it."""

    def __init__(self, target: Target, folder: Path) -> None:
        self.env = child_env(target.env())
        self.folder = folder
        self.ledger = target.open()
        self.outbox = Outbox(folder / "outbox.jsonl")
        asked = run_child(CHILD, "ask", str(folder), env=self.env)
        assert asked.returncode == 0, asked.stderr
        [self.shown] = self.ledger.approvals(run_id=RUN)

    def edit(self) -> None:
        history = ModelMessagesTypeAdapter.validate_json(self.path.read_bytes())
        edited = [_with_args(m, "call-1", MALLORY) for m in history]
        self.path.write_bytes(ModelMessagesTypeAdapter.dump_json(edited))

    @property
    def path(self) -> Path:
        return self.folder / "history.json"

    def continue_(self, step: str, *names: str) -> None:
        """Start one worker per name at once, each sending ``step``'s answer; wait for all."""
        (self.folder / "workers").write_text(" ".join(names))
        argv = [step, str(self.folder)]
        with ThreadPoolExecutor(len(names)) as pool:  # forked children, started at once
            done = list(pool.map(lambda n: run_child(CHILD, *argv, n, env=self.env), names))
        assert [d.returncode for d in done] == [0] * len(names), [d.stderr for d in done]


@pytest.mark.parametrize("when", ["before", "after"], ids=["edited-before-yes", "edited-after-yes"])
@pytest.mark.parametrize(
    "yes", ["ledger", "continue", "bare"], ids=["yes-in-ledger", "yes-echoed", "yes-bare"]
)
def test_an_edited_history_never_runs_its_edited_arguments(
    target: Target, tmp_path: Path, yes: str, when: str
) -> None:
    run = Workers(target, tmp_path)
    honest_ran = when == "after" and yes != "ledger"
    if when == "after":  # the yes is given and used on the history as it was shown
        if yes == "ledger":
            run.ledger.approve(run.shown.ticket, by="ann")
        else:
            run.continue_(yes, "w0")
    run.edit()
    if when == "before" and yes == "ledger":
        run.ledger.approve(run.shown.ticket, by="ann")
    for names in ROUNDS:
        run.continue_("resume" if yes == "ledger" else yes, *names)
        assert "mallory@example.com" not in run.outbox.sent()
    assert run.outbox.sent() == (["bob@example.com"] if honest_ran else [])
    asked = [t for t in run.ledger.approvals(run_id=RUN) if t.args == MALLORY]
    assert [t.state for t in asked] == ["pending"]  # one ticket for mallory, never approved
    # A person who sees mallory in the ledger and says yes lets that call run, once.
    run.ledger.approve(asked[0].ticket, by="lead")
    run.continue_("resume", "w5", "w6")
    assert run.outbox.sent().count("mallory@example.com") == 1


def test_an_approved_history_continued_by_workers_runs_once(target: Target, tmp_path: Path) -> None:
    run = Workers(target, tmp_path)
    for names in ROUNDS:
        run.continue_("continue", *names)
    assert run.outbox.sent() == ["bob@example.com"]
    [ticket] = run.ledger.approvals(run_id=RUN)
    assert (ticket.state, ticket.decided_by) == ("spent", "ann")


@pytest.mark.parametrize("no", ["deny", "deny-bare", "ledger", "cli"])
def test_a_later_no_wins_over_a_yes_not_yet_spent(
    target: Target, tmp_path: Path, no: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = Workers(target, tmp_path)
    run.ledger.approve(run.shown.ticket, by="ann")  # a yes in the ledger, not yet used
    if no.startswith("deny"):  # a copy of the history answered no through Pydantic AI
        run.continue_(no, "w0")
    elif no == "ledger":
        run.ledger.deny(run.shown.ticket, by="lead", reason="wrong customer")
    else:
        monkeypatch.setenv("CALL4AGENTS_SECRET", run.env["CALL4AGENTS_SECRET"])
        where = ["--url", target.url, *(["--schema", target.schema] if target.schema else [])]
        assert cli(["deny", run.shown.ticket, "--by", "lead", *where]) == 0
    run.continue_("resume", "w1", "w2")  # the yes's copy resumes after the no
    run.continue_("continue", "w3")
    assert run.outbox.sent() == []
    [ticket] = run.ledger.approvals(run_id=RUN)
    assert (ticket.state, ticket.decided_by) == ("denied", "lead")
