"""The shipped Prometheus rules, run by ``promtool`` over series Call4Agents' own metrics
produce: real actions recorded in phases, each phase's metrics held until the next one."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from importlib.resources import files
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import delete, update

import call4agents as c4a
from call4agents.controls import stats
from call4agents.storage.tables import approvals, run_counters, runs
from tests.conftest import Target
from tests.otel.conftest import Telemetry
from tests.otel.prometheus import Snapshot, input_series, snapshot

RULES = Path(str(files("call4agents").joinpath("alerts/call4agents.rules.yml")))
BASELINES = (10, 70, 130, 190, 250)  # minutes: ordinary traffic, one hour apart
SPIKE, BURST, BYPASS, TROUBLE = 330, 340, 350, 360
SAMPLES = 420


def _promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        reason = "promtool is not installed (Debian: apt-get install prometheus)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true but {reason}", pytrace=False)
        pytest.skip(reason)
    return found


class Agent:
    """Tools and runs that produce the metrics, one phase at a time."""

    def __init__(self, ledger: c4a.Ledger) -> None:
        self.ledger = ledger
        self.n = 0

        @c4a.effect(name="send")
        def send(n: int) -> str:
            return f"sent {n}"

        @c4a.effect(name="lookup", kind="read")
        def lookup(n: int) -> str:
            return f"found {n}"

        @c4a.effect(name="wire", kind="irreversible")
        def wire(n: int) -> str:
            return f"wired {n}"

        @c4a.effect(name="refund", approval=True)
        def refund(n: int) -> str:
            # The yes vanishes from the ledger (a row removed by hand): nothing shows it was given.
            with ledger.store.tx() as conn:
                conn.execute(delete(approvals))
            return f"refunded {n}"

        self.send, self.lookup, self.wire, self.refund = send, lookup, wire, refund

    def run_id(self) -> str:
        self.n += 1
        return f"run-{self.n}"

    def baseline(self) -> None:
        """Forty sends, one repeat, one wire, a read: a run that checked its work, cheap."""
        with c4a.run(self.run_id(), trigger="user", budget=c4a.Budget(max_cost=100)):
            c4a.record_model_usage(1000, 100, cost=0.02)
            self.lookup(self.n)
            for i in range(40):
                self.send(self.n * 1000 + i)
            self.send(self.n * 1000)  # a repeat, served from the record
            self.wire(self.n)

    def spike(self) -> None:
        """The same run entered again and again: every call a repeat."""
        run_id = f"run-{self.n}"
        with c4a.run(run_id, budget=c4a.Budget(max_cost=100)):
            for i in range(20):
                self.send(self.n * 1000 + i)

    def burst(self) -> None:
        with c4a.run(self.run_id()):
            self.lookup(0)
            for i in range(25):
                self.wire(10_000 + i)

    def bypass(self) -> None:
        run_id = self.run_id()
        with c4a.run(run_id):
            c4a.approve(self.refund, 1, by="ann")
            self.refund(1)

    def trouble(self) -> None:
        """A runaway run (cost 8), then a run that escalated two hours ago, then a completion
        without any read."""
        with c4a.run(self.run_id(), budget=c4a.Budget(max_cost=100)):
            self.lookup(1)
            c4a.record_model_usage(1000, 100, cost=8.0)
        escalated = self.run_id()
        with pytest.raises(c4a.Escalated), c4a.run(escalated):
            c4a.escalate("low confidence")
        self._two_hours_ago(escalated)
        with c4a.run(self.run_id()):
            self.send(99)

    def _two_hours_ago(self, run_id: str) -> None:
        """The run was entered, and escalated, two hours ago (database clock)."""
        now = self.ledger.store.now()
        entered = (run_counters.c.run_id == run_id) & (run_counters.c.name == "run.entered_at")
        with self.ledger.store.tx() as conn:
            conn.execute(update(runs).where(runs.c.run_id == run_id).values(updated_at=now - 7200))
            conn.execute(update(run_counters).where(entered).values(value=now - 7300))


def _phases(target: Target, telemetry: Telemetry) -> list[tuple[int, Snapshot]]:
    agent = Agent(c4a.init(target.open()))
    phases: list[tuple[int, Snapshot]] = []
    for minute in BASELINES:
        agent.baseline()
        phases.append((minute, snapshot(telemetry.reader)))
    for minute, step in ((SPIKE, agent.spike), (BURST, agent.burst), (BYPASS, agent.bypass)):
        step()
        phases.append((minute, snapshot(telemetry.reader)))
    agent.trouble()
    phases.append((TROUBLE, snapshot(telemetry.reader)))
    return phases


def _alert(name: str, at: int, *fired: dict[str, Any]) -> dict[str, Any]:
    return {"eval_time": f"{at}m", "alertname": name, "exp_alerts": list(fired)}


def _page(summary: str, **labels: str) -> dict[str, Any]:
    return {"exp_labels": {"severity": "page", **labels}, "exp_annotations": {"summary": summary}}


def _tests(series: list[dict[str, str]]) -> dict[str, Any]:
    quiet = 300  # after the baselines: nothing pages
    names = [
        "Call4AgentsIrreversibleExecutions",
        "Call4AgentsUnapprovedExecution",
        "Call4AgentsDedupRateSpike",
        "Call4AgentsEscalationBacklog",
        "Call4AgentsApprovalBacklog",
        "Call4AgentsCostPerRunP95",
        "Call4AgentsCostPerRunP99",
    ]
    alerts = [_alert(name, quiet) for name in names]
    alerts += [
        _alert(
            "Call4AgentsDedupRateSpike",
            SPIKE + 5,
            _page("repeats served from the record jumped above their baseline"),
        ),
        _alert("Call4AgentsIrreversibleExecutions", SPIKE + 5),
        _alert(
            "Call4AgentsIrreversibleExecutions",
            BURST + 5,
            _page(
                "wire ran too many times in the last hour (irreversible)", gen_ai_tool_name="wire"
            ),
        ),
        _alert("Call4AgentsUnapprovedExecution", BURST + 5),
        _alert(
            "Call4AgentsUnapprovedExecution",
            BYPASS + 5,
            _page("refund needs approval and ran with no recorded yes", gen_ai_tool_name="refund"),
        ),
        _alert(
            "Call4AgentsEscalationBacklog",
            TROUBLE + 5,
            _page("an escalated run has waited too long for a person"),
        ),
        _alert("Call4AgentsApprovalBacklog", TROUBLE + 5),
        _alert("Call4AgentsCostPerRunP95", TROUBLE + 5, _page("p95 cost per run is too high")),
        _alert("Call4AgentsCostPerRunP99", TROUBLE + 5, _page("p99 cost per run is too high")),
    ]
    trends = [
        {
            "expr": "count(call4agents:runs_without_read:share1d > 0)",
            "eval_time": f"{TROUBLE + 5}m",
            "exp_samples": [{"labels": "{}", "value": 1}],
        },
        {
            "expr": "count(call4agents:runs_without_read:share1d > 0)",
            "eval_time": f"{quiet}m",
            "exp_samples": [],
        },
        {
            "expr": "count(call4agents:runs_ended:share1d"
            '{call4agents_run_terminal_reason="completed"})',
            "eval_time": f"{quiet}m",
            "exp_samples": [{"labels": "{}", "value": 1}],
        },
        {
            "expr": "count(call4agents:run_tool_calls:p95_1d > 20)",
            "eval_time": f"{quiet}m",
            "exp_samples": [{"labels": "{}", "value": 1}],
        },
    ]
    return {
        "rule_files": [str(RULES)],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": series,
                "alert_rule_test": alerts,
                "promql_expr_test": trends,
            }
        ],
    }


def test_promtool_checks_the_rules() -> None:
    done = subprocess.run(
        [_promtool(), "check", "rules", str(RULES)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_alerts_fire_on_our_own_metrics(
    sqlite_target: Target, telemetry: Telemetry, tmp_path: Path
) -> None:
    promtool = _promtool()
    phases = _phases(sqlite_target, telemetry)
    names = {name.split("{")[0] for _, snap in phases for name in snap}
    # Every metric the rules read is one the project produced in this test.
    for wanted in (
        "call4agents_actions_total",
        "call4agents_irreversible_executions_total",
        "call4agents_unapproved_executions_total",
        "call4agents_runs_ended_total",
        "call4agents_runs_completed_without_read_total",
        "call4agents_escalations_oldest_age_seconds",
        "call4agents_approvals_oldest_age_seconds",
        "call4agents_run_cost_bucket",
        "call4agents_run_tool_calls_bucket",
    ):
        assert wanted in names, sorted(names)
    # JSON is YAML: promtool reads it as its test file.
    test_file = tmp_path / "call4agents.test.yml"
    test_file.write_text(json.dumps(_tests(input_series(phases, SAMPLES))))
    done = subprocess.run(
        [promtool, "test", "rules", str(test_file)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]


def test_stats_shows_the_figures_the_alerts_watch(
    sqlite_target: Target, telemetry: Telemetry, tmp_path: Path
) -> None:
    _phases(sqlite_target, telemetry)
    done = subprocess.run(
        ["call4agents", "stats", "--json", "--url", sqlite_target.url],
        capture_output=True,
        text=True,
        check=True,
    )
    figures = json.loads(done.stdout)["alerts"]
    assert figures["escalations_open"] == 1
    assert figures["escalations_oldest_age"] > 7000
    # Nine runs completed (the spike entered run-5 again, a retry); the refund run and the last
    # one never read anything.
    assert figures["runs_completed"] == 9
    assert figures["runs_completed_without_read"] == 2
    assert figures["cost_per_run_p99"] == 8.0
    assert figures["runs_by_trigger"] == {"retry": 1, "user": 5}
    assert figures["runs_by_ending"]["escalated"] == 1
    assert figures["irreversible_executions"] == 30
    text = subprocess.run(
        ["call4agents", "stats", "--url", sqlite_target.url],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "Completed without a read: 2 of 9 completed runs (22.2%" in text


def test_all_time_figures_equal_every_run_counted_one_by_one(
    target: Target, telemetry: Telemetry
) -> None:
    # All time, the database counts the alerts' run figures over an index of counter values; a
    # window wide enough to hold every run reads each run's counters, as stats did before.
    _phases(target, telemetry)
    with target.open() as ledger:
        by_index = stats._every_run(ledger)
        one_by_one = stats._runs_entered(ledger, 10 * 365 * 86400.0)
    assert by_index == one_by_one
    assert by_index.completed == 9
    assert by_index.triggers == {"retry": 1, "user": 5}
