"""What the OpenTelemetry observer adds to one action: a fresh effect and a repeat, side by side.

    .venv/bin/python benchmarks/bench_otel.py [--n N]

Four set-ups, each on its own fresh SQLite ledger (durability "process", so the fsync does not
drown the difference), interleaved in rounds so drift touches each alike:

- ``off``: no observer installed (what a process without ``opentelemetry`` gets: one global read);
- ``otel API only``: the automatic default when ``opentelemetry`` is importable but the
  application set up no SDK: the layer sees no provider and stands aside;
- ``no-op providers``: no-op providers given explicitly: non-recording spans are made and ended,
  metrics go nowhere (the cost of the layer itself);
- ``otel SDK``: a real TracerProvider and MeterProvider that record every span and metric
  (spans handed to a batch processor with an exporter that drops them, so export is not timed).

Times are ``time.perf_counter_ns`` around each single call, after a warm-up. The per-step span
row times what an integration adds to each turn of the agent loop (``integration.step`` opened,
given the model's figures, closed), beside an empty call timed the same way (the floor). The
Agents SDK row times that integration's share of one model request: its ``on_llm_start`` and
``on_llm_end`` step work (open the step and keep it with the run's context, then read the
response's usage and output items, put them on the step and end it).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

import call4agents as c4a
from call4agents.controls.telemetry import configure
from call4agents.integration import StepFigures, step

SETUPS = ("off", "otel API only", "no-op providers", "otel SDK")


class _Drop(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


def _configure(setup: str, providers: tuple[TracerProvider, MeterProvider]) -> None:
    if setup == "off":
        configure(False)
    elif setup == "otel API only":
        configure(True)  # the global providers, which nothing in this process sets
    elif setup == "no-op providers":
        # Given explicitly, no-op providers make the layer create (non-recording) spans.
        from opentelemetry.metrics import NoOpMeterProvider
        from opentelemetry.trace import NoOpTracerProvider

        configure(True, tracer_provider=NoOpTracerProvider(), meter_provider=NoOpMeterProvider())
    else:
        configure(True, tracer_provider=providers[0], meter_provider=providers[1])


@c4a.effect(name="bench.send")
def send(i: int, to: str = "bob@example.com") -> dict[str, Any]:
    return {"ok": True, "id": i}


_FIGURES = StepFigures(stop_reason="tool_call", model="m", input_tokens=100, output_tokens=20)


def one_step(i: int) -> None:
    with step("bench", i) as turn:
        turn.finish(_FIGURES)


def sdk_step() -> Callable[[int], None]:
    """The Agents SDK integration's step work for one model request, on the SDK's own objects."""
    from agents import Agent, RunContextWrapper, Usage
    from agents.items import ModelResponse
    from agents.testing import assistant_message

    from call4agents_openai_agents import _steps

    agent: Agent[Any] = Agent(name="bench", model="bench-model")
    wrapper: RunContextWrapper[Any] = RunContextWrapper(context=None)
    usage = Usage(requests=1, input_tokens=100, output_tokens=20, total_tokens=120)
    response = ModelResponse(output=[assistant_message("done")], usage=usage, response_id=None)

    def one(i: int) -> None:
        _steps.started(wrapper, agent, "bench")
        _steps.ended(wrapper, response)

    return one


def nothing(i: int) -> None:
    return None


def _time(fn: Callable[[], Any]) -> int:
    started = time.perf_counter_ns()
    fn()
    return time.perf_counter_ns() - started


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000, help="actions per set-up (default 2000)")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(BatchSpanProcessor(_Drop()))
    meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    providers = (tracer_provider, meter_provider)
    fresh: dict[str, list[int]] = {s: [] for s in SETUPS}
    repeat: dict[str, list[int]] = {s: [] for s in SETUPS}
    steps: dict[str, list[int]] = {s: [] for s in SETUPS}
    sdk_steps: dict[str, list[int]] = {s: [] for s in SETUPS}
    sdk_one = sdk_step()
    floor: dict[str, list[int]] = {s: [] for s in SETUPS}
    with tempfile.TemporaryDirectory() as tmp:
        ledgers = {
            s: c4a.Ledger(f"sqlite:///{Path(tmp) / f'{i}.db'}", durability="process")
            for i, s in enumerate(SETUPS)
        }
        per_round = args.n // args.rounds
        for r in range(args.rounds):
            for setup in SETUPS:
                _configure(setup, providers)
                with c4a.run(f"bench-{r}", ledger=ledgers[setup]):
                    for i in range(-20, 0):  # warm-up
                        send(i - r * 1000)
                    ids = range(r * per_round, (r + 1) * per_round)
                    fresh[setup] += [_time(lambda i=i: send(i)) for i in ids]
                    repeat[setup] += [_time(lambda i=i: send(i)) for i in ids]
                    steps[setup] += [_time(lambda i=i: one_step(i)) for i in ids]
                    sdk_steps[setup] += [_time(lambda i=i: sdk_one(i)) for i in ids]
                    floor[setup] += [_time(lambda i=i: nothing(i)) for i in ids]
        for ledger in ledgers.values():
            ledger.close()
    configure(None)
    tracer_provider.shutdown()
    meter_provider.shutdown()
    _report(fresh, repeat)
    _report_steps(steps, sdk_steps, floor)


def _report_steps(
    steps: dict[str, list[int]], sdk_steps: dict[str, list[int]], floor: dict[str, list[int]]
) -> None:
    rows = (
        ("per-step span", steps),
        ("Agents SDK step hooks", sdk_steps),
        ("empty call (floor)", floor),
    )
    for label, data in rows:
        cells = " ".join(f"{_us(data[s], 0.5):>13.1f} us" for s in SETUPS)
        print(f"{label + ' median':32} {cells}")


def _us(values: list[int], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] / 1000


def _report(fresh: dict[str, list[int]], repeat: dict[str, list[int]]) -> None:
    header = f"{'case':32} " + " ".join(f"{s:>16}" for s in SETUPS)
    print(header)
    print("-" * len(header))
    for label, data in (("fresh effect", fresh), ("repeat (same process)", repeat)):
        for stat, q in (("median", 0.5), ("p99", 0.99)):
            cells = " ".join(f"{_us(data[s], q):>13.1f} us" for s in SETUPS)
            print(f"{label + ' ' + stat:32} {cells}")
        base = statistics.median(data["off"]) / 1000
        added = " ".join(f"{statistics.median(data[s]) / 1000 - base:>+13.1f} us" for s in SETUPS)
        print(f"{label + ' added (median)':32} {added}")


if __name__ == "__main__":
    main()
