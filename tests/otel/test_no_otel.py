"""Without OpenTelemetry importable: the hook stays empty and effects run as always."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.conftest import Target

BLOCKED = """
import sys

class Block:
    # A meta path finder that makes every opentelemetry module unimportable, as if not installed.
    def find_spec(self, name, path=None, target=None):
        if name == "opentelemetry" or name.startswith("opentelemetry."):
            raise ModuleNotFoundError(f"No module named {name!r}")
        return None

sys.meta_path.insert(0, Block())
"""

BODY = """
import call4agents as c4a
from call4agents.engine import observe
from call4agents.controls import telemetry

assert telemetry.otel_available() is False
assert observe.hook is None, observe.hook
ledger = c4a.init(sys.argv[1])
count = 0

@c4a.effect(name="send_email")
def send_email(to):
    global count
    count += 1
    return {"id": "m-1"}

with c4a.run("r"):
    send_email("bob")
    send_email("bob")
assert count == 1
assert observe.hook is None
assert not [m for m, mod in sys.modules.items() if m.startswith("opentelemetry") and mod]
try:
    c4a.init(sys.argv[1], otel=True)
except c4a.ConfigurationError as exc:
    print("refused:", exc)
print("ok")
"""


def run(prelude: str, target: Target, tmp_path: Path) -> str:
    done = subprocess.run(
        [sys.executable, "-c", prelude + BODY, target.url],
        capture_output=True,
        text=True,
        env=target.env(),
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_meta_path_blocked(sqlite_target: Target, tmp_path: Path) -> None:
    out = run(BLOCKED, sqlite_target, tmp_path)
    assert "refused: otel=True needs OpenTelemetry, which is not installed" in out
    assert 'pip install "call4agents-core[otel]"' in out
    assert out.strip().endswith("ok")


def test_sys_modules_none(sqlite_target: Target, tmp_path: Path) -> None:
    out = run("import sys\nsys.modules['opentelemetry'] = None\n", sqlite_target, tmp_path)
    assert out.strip().endswith("ok")


def test_switched_off_by_environment(sqlite_target: Target, tmp_path: Path) -> None:
    prelude = "import os, sys\nos.environ['CALL4AGENTS_OTEL'] = '0'\n"
    body = "import call4agents\nfrom call4agents.engine import observe\n"
    body += "assert observe.hook is None\n"
    done = subprocess.run(
        [sys.executable, "-c", prelude + body], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr


LATE_SDK = """
import sys
import call4agents as c4a
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

c4a.init(sys.argv[1])

@c4a.effect(name="send_email")
def send_email(to):
    return {"id": to}

with c4a.run("r"):
    send_email("ann")  # no SDK yet: the layer stands aside
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)  # set up late, as some applications do
    send_email("bob")
    send_email("bob")
print(sorted(s.name for s in exporter.get_finished_spans()))
"""


def test_an_sdk_set_up_late_gets_every_span_after(sqlite_target: Target) -> None:
    # The layer skips itself only while no provider exists; from the moment one is set, it
    # records: the action after the set-up and its repeat each get a span.
    done = subprocess.run(
        [sys.executable, "-c", LATE_SDK, sqlite_target.url],
        capture_output=True,
        text=True,
        env=sqlite_target.env(),
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['execute_tool send_email', 'execute_tool send_email']"
