"""OpenTelemetry metric points as the Collector's Prometheus exporter names them, and a
``promtool test rules`` input built from snapshots of them."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from opentelemetry.sdk.metrics.export import (
    Gauge,
    Histogram,
    InMemoryMetricReader,
    Sum,
)

Snapshot = dict[str, float]


def _name(name: str, unit: str) -> str:
    base = name.replace(".", "_")
    # Units in braces are annotations ({action}) and are dropped; seconds get their suffix.
    suffix = {"s": "_seconds", "1": "_ratio", "By": "_bytes"}.get(unit, "")
    return base + suffix


def _labels(attributes: Any, extra: dict[str, str] | None = None) -> str:
    found = {
        k.replace(".", "_"): str(v).lower() if isinstance(v, bool) else str(v)
        for k, v in dict(attributes or {}).items()
    }
    found.update(extra or {})
    if not found:
        return ""
    return "{" + ",".join(f'{k}="{v}"' for k, v in sorted(found.items())) + "}"


def _le(bound: float) -> str:
    return "+Inf" if math.isinf(bound) else repr(float(bound))


def snapshot(reader: InMemoryMetricReader) -> Snapshot:
    """Every series the reader collects now, as ``name{labels}`` -> value."""
    found: Snapshot = {}
    data = reader.get_metrics_data()
    for resource in data.resource_metrics if data else []:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                name = _name(metric.name, metric.unit or "")
                _add(found, name, metric.data)
    return found


def _add(found: Snapshot, name: str, data: Any) -> None:
    if isinstance(data, Sum):
        total = name + ("_total" if data.is_monotonic else "")
        for p in data.data_points:
            found[total + _labels(p.attributes)] = float(p.value)
    elif isinstance(data, Gauge):
        for p in data.data_points:
            found[name + _labels(p.attributes)] = float(p.value)
    elif isinstance(data, Histogram):
        for p in data.data_points:
            running = 0
            bounds = [*p.explicit_bounds, math.inf]
            for bound, count in zip(bounds, p.bucket_counts, strict=True):
                running += count
                le = {"le": _le(bound)}
                found[f"{name}_bucket" + _labels(p.attributes, le)] = float(running)
            found[f"{name}_sum" + _labels(p.attributes)] = float(p.sum)
            found[f"{name}_count" + _labels(p.attributes)] = float(p.count)


def input_series(phases: Sequence[tuple[int, Snapshot]], samples: int) -> list[dict[str, str]]:
    """promtool ``input_series``: each snapshot holds from its start minute until the next one;
    a series not yet collected is absent (``_``), as it would be in Prometheus."""
    names = sorted({name for _, snap in phases for name in snap})
    series = []
    for name in names:
        values = []
        for minute in range(samples):
            current = [snap for start, snap in phases if start <= minute]
            value = current[-1].get(name) if current else None
            values.append("_" if value is None else repr(value))
        series.append({"series": name, "values": " ".join(values)})
    return series
