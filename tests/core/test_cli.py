"""The `call4agents` command, driven through `main([...])` against real ledgers on both backends."""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import pytest

import call4agents as c4a
from call4agents.facade.cli import main, parse_age
from call4agents.storage.migrations import CURRENT

Cli = Callable[..., tuple[int, str, str]]
UNREACHABLE = "postgresql+psycopg://app:Sup3rSecret@127.0.0.1:1/x"


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Cli:
    """Run the CLI on a target's ledger (or with no --url when target is None)."""

    def call(target: Any, *argv: str) -> tuple[int, str, str]:
        full = list(argv)
        if target is not None:
            full += ["--url", target.url, *(["--schema", target.schema] if target.schema else [])]
        code = main(full)
        out, err = capsys.readouterr()
        return code, out, err

    return call


class Agent:
    """Run "ticket-1": an email sent, a charge in doubt (timed out) and a failed lookup."""

    def __init__(self, ledger: c4a.Ledger) -> None:
        self.ledger = ledger
        self.charges = 0

        @c4a.effect(ledger=ledger, name="send_email")
        def send_email(to: str) -> dict[str, str]:
            return {"id": "msg-1", "to": to}

        @c4a.effect(ledger=ledger, name="charge")
        def charge(amount: int) -> dict[str, Any]:
            self.charges += 1
            if self.charges == 1:
                raise TimeoutError("payment gateway timed out")
            return {"id": f"ch-{self.charges}", "amount": amount}

        @c4a.effect(ledger=ledger, name="lookup")
        def lookup(q: str) -> str:
            raise ValueError("no such customer")

        self.charge = charge
        with c4a.run("ticket-1"):
            send_email("bob@example.com")
            with pytest.raises(TimeoutError):
                charge(1200)
            with pytest.raises(ValueError):
                lookup("bob")

    def charge_again(self) -> Any:
        with c4a.run("ticket-1"):
            return self.charge(1200)

    @property
    def doubt_key(self) -> str:
        [record] = self.ledger.in_doubt()
        return record.key


def one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("call4agents: error: ")
    assert "Traceback" not in err
    return lines[0]


def test_doubt_table_and_fail_if_any(target: Any, cli: Cli) -> None:
    agent = Agent(target.open())
    code, out, _ = cli(target, "doubt")
    assert code == 0
    header, row = out.splitlines()[:2]
    assert header.split() == ["KEY", "RUN", "TOOL", "ATTEMPT", "SINCE", "WHY"]
    assert row.startswith(agent.doubt_key[:12] + "  ")
    assert "ticket-1" in row
    assert "charge" in row
    assert "ago" in row or "just now" in row
    assert "TimeoutError: payment gateway timed out" in row
    assert cli(target, "doubt", "--fail-if-any")[0] == 3

    code, out, _ = cli(target, "doubt", "--json", "--fail-if-any")
    assert code == 3
    [item] = json.loads(out)
    assert item["key"] == agent.doubt_key
    assert item["state"] == "in_doubt"
    assert (item["tool"], item["run_id"], item["attempt"]) == ("charge", "ticket-1", 1)
    assert item["args"] == {"amount": 1200}


def test_doubt_empty(target: Any, cli: Cli) -> None:
    target.open()
    assert cli(target, "doubt", "--fail-if-any") == (0, "No actions in doubt.\n", "")
    assert json.loads(cli(target, "doubt", "--json")[1]) == []


def test_resolve_happened_settles_show_and_repeats(target: Any, cli: Cli) -> None:
    agent = Agent(target.open())
    key = agent.doubt_key
    code, out, _ = cli(
        target,
        "resolve",
        key[:12],
        "--happened",
        "--result",
        '{"id": "ch-real", "amount": 1200}',
        "--by",
        "ann",
        "--note",
        "in Stripe",
    )
    assert (code, out) == (0, "Resolved charge in run ticket-1: happened (by ann)\n")
    assert cli(target, "doubt", "--fail-if-any")[0] == 0

    code, out, _ = cli(target, "show", "ticket-1")
    assert code == 0
    assert out.strip().endswith("2 done, 0 in doubt, 1 failed")
    charge_row = next(line for line in out.splitlines() if " charge " in line)
    assert " done " in charge_row
    assert '"ch-real"' in charge_row
    assert "note: resolved by ann: happened (in Stripe)" in out
    # The agent resumes: the charge is not made again, the resolved result comes back.
    assert agent.charge_again() == {"id": "ch-real", "amount": 1200}
    assert agent.charges == 1

    shown = json.loads(cli(target, "show", "ticket-1", "--json")[1])
    assert (shown["run_id"], shown["ending"], shown["handoff"]) == ("ticket-1", None, None)
    [record] = [r for r in shown["actions"] if r["tool"] == "charge"]
    assert record["state"] == "succeeded"
    assert record["resolved_by"] == "ann"


def test_resolve_did_not_happen_runs_again_and_keeps_late_evidence(
    target: Any, cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = Agent(ledger := target.open())
    key = agent.doubt_key
    monkeypatch.setenv("USER", "bob")  # --by defaults to $USER
    code, out, _ = cli(target, "resolve", key, "--did-not-happen", "--json")
    assert code == 0
    assert json.loads(out)["state"] == "failed"
    assert json.loads(out)["resolved_by"] == "bob"
    # The timed-out attempt's result arrives after all: kept as evidence, never applied, and
    # the action goes back to in doubt, since running it again would now be a likely duplicate.
    ledger.store.finish(key, 1, state="succeeded", result='{"id":"ch-late"}')
    with pytest.raises(c4a.EffectInDoubt):
        agent.charge_again()
    code, out, _ = cli(target, "show", "ticket-1")
    assert "evidence: attempt 1 ended succeeded late" in out
    assert "ch-late" in out
    charge_row = next(line for line in out.splitlines() if " charge " in line)
    assert charge_row.split()[1:4] == ["charge", "in", "doubt"]
    assert cli(target, "resolve", key, "--happened", "--result", '{"id": "ch-late"}')[0] == 0
    assert agent.charge_again() == {"id": "ch-late"}


def test_runs(target: Any, cli: Cli) -> None:
    ledger = target.open()
    assert cli(target, "runs") == (0, "No runs recorded.\n", "")
    Agent(ledger)
    code, out, _ = cli(target, "runs", "--limit", "5")
    assert code == 0
    header, row = out.splitlines()
    assert header.split() == [
        "RUN",
        "ACTIONS",
        "DONE",
        "FAILED",
        "IN",
        "DOUBT",
        "RUNNING",
        "WAITING",
        "LAST",
        "ACTIVE",
    ]
    assert row.split()[:7] == ["ticket-1", "3", "1", "1", "1", "0", "0"]
    [summary] = json.loads(cli(target, "runs", "--json")[1])
    assert summary["run_id"] == "ticket-1"
    assert (summary["actions"], summary["succeeded"], summary["in_doubt"]) == (3, 1, 1)


@pytest.mark.parametrize("json_flag", [[], ["--json"]])
def test_show_undo_and_export_agree_on_an_unknown_run(
    target: Any, cli: Cli, json_flag: list[str]
) -> None:
    Agent(target.open())
    errors = set()
    for command in ("show", "undo", "export"):
        code, out, err = cli(target, command, "no-such-run", *json_flag)
        assert (code, out) == (2, ""), command
        errors.add(one_error_line(err))
    [error] = errors  # the same line from all three
    assert "no run 'no-such-run' in this ledger" in error


def pending_approval(ledger: c4a.Ledger, run_id: str) -> None:
    @c4a.effect(ledger=ledger, name="refund", approval=True)
    def refund(order: str) -> str:
        return order

    with c4a.run(run_id), pytest.raises(c4a.ApprovalRequired):
        refund("A-17")


def test_a_run_whose_only_record_is_a_pending_approval(target: Any, cli: Cli) -> None:
    ledger = target.open()
    Agent(ledger)
    pending_approval(ledger, "asking")
    code, out, _ = cli(target, "runs")
    assert code == 0
    rows = {line.split()[0]: line.split() for line in out.splitlines()[1:]}
    assert rows["asking"][1:7] == ["0", "0", "0", "0", "0", "1"]  # no actions, 1 waiting
    assert "ticket-1" in rows
    listed = json.loads(cli(target, "runs", "--json")[1])
    assert {r["run_id"]: r["approvals_waiting"] for r in listed} == {"asking": 1, "ticket-1": 0}
    code, out, _ = cli(target, "show", "asking")
    assert code == 0
    assert "1 approval(s) waiting: `call4agents approvals --run asking`" in out


def test_json_timestamps_are_iso_8601(target: Any, cli: Cli) -> None:
    ledger = target.open()
    Agent(ledger)
    pending_approval(ledger, "asking")
    [run] = [r for r in json.loads(cli(target, "runs", "--json")[1]) if r["run_id"] == "ticket-1"]
    [doubt] = json.loads(cli(target, "doubt", "--json")[1])
    [ticket] = json.loads(cli(target, "approvals", "--json")[1])
    stamps = [run["first_at"], run["last_at"], doubt["created_at"], doubt["updated_at"]]
    stamps += [ticket["requested_at"], ticket["expires_at"]]
    for stamp in stamps:
        when = datetime.datetime.fromisoformat(stamp)
        assert when.utcoffset() == datetime.timedelta(0), stamp
        assert abs(when.timestamp() - time.time()) < 2 * 86400, stamp


def test_version_and_a_bare_command(cli: Cli) -> None:
    code, out, _ = cli(None, "--version")
    assert (code, out) == (0, f"call4agents {c4a.__version__}\n")
    # No command is a usage error, as argparse's own are: the help on stderr, exit 2.
    code, out, err = cli(None)
    assert (code, out) == (2, "")
    assert err.startswith("usage: call4agents")
    assert "quickstart" in err
    assert "doubt" in err


def test_a_negative_age_says_what_is_wrong(sqlite_target: Any, cli: Cli) -> None:
    sqlite_target.open()
    for argv in (["gc", "--older-than", "-3d"], ["stats", "--since", "-1h"]):
        code, out, err = cli(sqlite_target, *argv)
        assert (code, out) == (2, "")
        assert "is negative" in one_error_line(err), argv


def test_diff_of_files_that_do_not_exist_says_so(
    sqlite_target: Any, cli: Cli, tmp_path: Any
) -> None:
    Agent(sqlite_target.open())
    code, out, err = cli(sqlite_target, "diff", str(tmp_path / "a.json"), "ticket-1")
    assert (code, out) == (2, "")
    assert f"{tmp_path / 'a.json'}: no such file" in one_error_line(err)
    code, _, err = cli(sqlite_target, "diff", "ticket-1", "b.json")
    assert "b.json: no such file" in one_error_line(err)


def test_show_json_is_one_document_with_the_ending_and_handoff(target: Any, cli: Cli) -> None:
    ledger = c4a.init(target.open())

    @c4a.effect(name="pay")
    def pay(n: int) -> dict[str, Any]:
        return {"payment_id": f"p-{n}"}

    with c4a.run("esc-json"):
        pay(1)
        with pytest.raises(c4a.Escalated):
            c4a.escalate("the customer disputes the order", what_remains="call the customer")
    code, out, _ = cli(target, "show", "esc-json", "--json")
    assert code == 0
    doc = json.loads(out)
    assert [a["tool"] for a in doc["actions"]] == ["pay"]
    assert (doc["ending"]["status"], doc["ending"]["reason"]) == (
        "escalated",
        "the customer disputes the order",
    )
    assert doc["handoff"]["what_remains"] == ["call the customer"]
    assert doc["handoff"]["done"][0]["external_ids"] == {"payment_id": "p-1"}
    # The list of actions alone, the shape `--json` had before, for scripts that read it.
    code, out, _ = cli(target, "show", "esc-json", "--json", "--actions")
    assert code == 0
    assert [a["tool"] for a in json.loads(out)] == ["pay"]

    # Escalated before any action: the hand-off is the document's point, and it is no failure.
    with pytest.raises(c4a.Escalated), c4a.run("esc-empty"):
        c4a.escalate("nothing I can do", blocking_fact="the account is closed")
    code, out, _ = cli(target, "show", "esc-empty", "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc["actions"] == []
    assert doc["ending"]["status"] == "escalated"
    assert doc["handoff"]["blocking_fact"] == "the account is closed"

    # A budget cut is an ending without a hand-off.
    with c4a.run("cut-json", budget=c4a.Budget(max_tool_calls=1)):
        pay(1)
        with pytest.raises(c4a.BudgetExceeded):
            pay(2)
    doc = json.loads(cli(target, "show", "cut-json", "--json")[1])
    assert (doc["ending"]["status"], doc["ending"]["reason"]) == ("step_limit", "1 tool calls")
    assert doc["ending"]["details"]["budget"]["tool"] == "pay"
    assert doc["handoff"] is None
    assert ledger.run_status("cut-json") is not None


def test_show_prints_what_a_budget_spent(target: Any, cli: Cli) -> None:
    c4a.init(target.open())

    @c4a.effect(name="pay")
    def pay(n: int) -> int:
        return n

    with c4a.run("spender", budget=c4a.Budget(max_tool_calls=2, token_prices=(2.0, 10.0))):
        c4a.count_model_request()
        c4a.record_model_usage(1000, 500)
        pay(1)
        pay(2)
        with pytest.raises(c4a.BudgetExceeded):
            pay(3)
    code, out, _ = cli(target, "show", "spender")
    assert code == 0
    assert (
        "Budget spent: 2 tool calls (pay: 2), 1 model requests, 1000 input / 500 output tokens, "
        "cost 0.007"
    ) in out
    assert "Run ended: step limit (2 tool calls)" in out


def test_gc(target: Any, cli: Cli) -> None:
    Agent(target.open())
    code, out, _ = cli(target, "gc", "--older-than", "30d")
    assert code == 0
    assert out == (
        "Pruned 0 finished actions (tombstones kept), deleted 0 failed, "
        "kept 0 open (started or in doubt)\n"
    )
    code, out, _ = cli(target, "gc", "--older-than", "0", "--json")
    assert json.loads(out) == {"pruned": 1, "deleted": 1, "kept_open": 1, "older_than_seconds": 0}
    code, out, _ = cli(target, "show", "ticket-1")
    assert "(result pruned by gc)" in out
    assert "1 done, 1 in doubt, 0 failed" in out


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30d", 30 * 86400), ("12h", 43200), ("15m", 900), ("45s", 45), ("90", 90), ("1.5h", 5400)],
)
def test_parse_age(text: str, seconds: float) -> None:
    assert parse_age(text) == seconds


def test_migrate(target: Any, cli: Cli) -> None:
    code, out, _ = cli(target, "migrate")
    assert code == 0
    assert out.startswith(f"Ledger at {target.url}")  # the test URLs have no password to mask
    assert out.endswith(f": schema version 0 -> {CURRENT}\n")
    assert cli(target, "migrate")[1].endswith(f": already at version {CURRENT}\n")
    assert json.loads(cli(target, "migrate", "--json")[1])["after"] == CURRENT
    assert cli(target, "doubt") == (0, "No actions in doubt.\n", "")


def test_migrate_and_doctor_refuse_a_development_ledger(sqlite_target: Any, cli: Cli) -> None:
    from call4agents.storage.tables import schema_version

    with sqlite_target.open() as ledger, ledger.engine.begin() as conn:
        conn.execute(schema_version.update().values(version=12))
    code, _, err = cli(sqlite_target, "migrate")
    assert code == 2
    assert "development build" in one_error_line(err)
    assert "was not changed" in err
    checks = json.loads(cli(sqlite_target, "doctor", "--json")[1])["checks"]
    [schema] = [c for c in checks if c["name"] == "schema"]
    assert schema["status"] == "FAIL"
    assert "schema version 12, written by a development build" in schema["detail"]


def test_reading_commands_do_not_create_or_migrate(sqlite_target: Any, cli: Cli) -> None:
    code, _, err = cli(sqlite_target, "doubt")
    assert code == 2
    assert "there is no ledger at" in one_error_line(err)
    assert cli(sqlite_target, "doctor")[0] == 1
    open(sqlite_target.url.removeprefix("sqlite:///"), "w").close()  # an empty file: version 0
    code, _, err = cli(sqlite_target, "runs")
    assert code == 2
    assert "call4agents migrate" in one_error_line(err)


def test_doctor_ok_on_sqlite(sqlite_target: Any, cli: Cli) -> None:
    Agent(sqlite_target.open())
    code, out, _ = cli(sqlite_target, "doctor")
    assert code == 0, out
    status = {line.split()[1]: line.split()[0] for line in out.splitlines()}
    assert status["url"] == status["schema"] == status["journal"] == "OK"
    assert status["permissions"] == status["clock"] == status["secret"] == "OK"
    assert status["database"] == status["integrity"] == "OK"
    assert status["actions"] == "WARN"
    assert "FAIL" not in out
    assert "1 in doubt" in out
    report = json.loads(cli(sqlite_target, "doctor", "--json")[1])
    assert report["ok"] is True
    assert {c["name"] for c in report["checks"]} >= {"url", "database", "schema", "clock", "secret"}


def test_doctor_reports_unreachable_database_without_password(cli: Cli) -> None:
    code, out, _ = cli(None, "doctor", "--url", UNREACHABLE)
    assert code == 1
    assert "FAIL" in out
    assert "Sup3rSecret" not in out
    assert "app:***@" in out


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["gc", "--older-than", "ten days"], "like 30d, 12h, 15m or 45s"),
        (
            ["resolve", "abcdef123456", "--happened", "--by", "ann", "--result", "{oops"],
            "--result must be JSON",
        ),
        (["resolve", "abcdef123456", "--did-not-happen", "--by", "ann"], "no action with key"),
        (["resolve", "abcdef123456", "--by", "ann"], "one of the arguments"),
        (["show"], "required: run"),
        (["gc", "--older-than", "1d", "--url", "mysql://u:p@h/d"], "unsupported ledger URL"),
        (["doubt", "--url", "sqlite://x.db"], "for the file x.db write sqlite:///x.db"),
        (["doubt", "--url", "sqlite://ops/x.db"], "for the file ops/x.db write sqlite:///ops/x.db"),
    ],
)
def test_errors_are_one_line(sqlite_target: Any, cli: Cli, argv: list[str], expected: str) -> None:
    sqlite_target.open()
    code, out, err = cli(sqlite_target if "--url" not in argv else None, *argv)
    assert code == 2
    assert out == ""
    assert expected in one_error_line(err)


def test_resolve_without_a_name_checks_the_key_first(
    sqlite_target: Any, cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = Agent(sqlite_target.open())
    monkeypatch.delenv("USER", raising=False)
    monkeypatch.delenv("LOGNAME", raising=False)
    code, _, err = cli(sqlite_target, "resolve", "abcdef123456", "--happened")
    assert code == 2
    assert "no action with key" in one_error_line(err)
    # The key is right: now the name is what is missing, and nothing was settled.
    code, _, err = cli(sqlite_target, "resolve", agent.doubt_key[:12], "--happened")
    assert code == 2
    assert "--by NAME ($USER is not set)" in one_error_line(err)
    assert len(sqlite_target.open().in_doubt()) == 1


def test_a_missing_postgres_database_says_how_to_create_it(cli: Cli) -> None:
    from sqlalchemy.engine import make_url

    from tests.conftest import postgres_url

    server = make_url(postgres_url())
    missing = server.set(database="c4a_no_such_database").render_as_string(hide_password=False)
    code, out, err = cli(None, "doubt", "--url", missing)
    assert (code, out) == (2, "")
    line = one_error_line(err)
    assert f"createdb -h {server.host}" in line
    assert line.endswith("c4a_no_such_database), then try again")


def test_unreachable_database_hides_password(cli: Cli) -> None:
    for command in (["doubt"], ["migrate"], ["runs"], ["show", "r"], ["gc", "--older-than", "1d"]):
        code, out, err = cli(None, *command, "--url", UNREACHABLE)
        assert code == 2
        assert out == ""
        line = one_error_line(err)
        assert "Sup3rSecret" not in line
        assert "127.0.0.1" in line


def test_console_script_in_subprocess(sqlite_target: Any) -> None:
    Agent(sqlite_target.open())
    env = dict(os.environ, CALL4AGENTS_URL=sqlite_target.url)

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "call4agents", *argv],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    done = run("doubt", "--fail-if-any")
    assert done.returncode == 3
    assert "charge" in done.stdout
    done = run("--url", UNREACHABLE, "doubt")
    assert done.returncode == 2
    assert done.stdout == ""
    assert "Sup3rSecret" not in done.stderr
    one_error_line(done.stderr)


def test_quickstart_passes_its_arguments_through(cli: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    from call4agents.facade import quickstart

    seen: list[list[str]] = []
    monkeypatch.setattr(quickstart, "main", lambda argv: seen.append(argv) or 7)
    assert cli(None, "quickstart", "--crash", "x")[0] == 7
    assert cli(None, "--url", "sqlite:///q.db", "quickstart")[0] == 7
    assert seen == [["--crash", "x"], ["--url", "sqlite:///q.db"]]
