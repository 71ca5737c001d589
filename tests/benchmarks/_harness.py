"""Shared timing helpers for `make bench` (never used by tests: no timing asserts anywhere).

A benchmark module is `tests/benchmarks/bench_<topic>.py` exposing `run(quick: bool) -> list[dict]`;
each dict is one row of `bench/results.json`: {"name", "params", "p50_us", "p99_us", "ops_per_s",
"baseline": {"name", "p50_us", "p99_us", "ops_per_s", ...} | None, "extra": {...}}. Names follow
issue 13 (`placement.decision`, `buddy.alloc_free`, `raft.core.commits`, ...). `result()` builds
a row from raw samples; `baseline()` turns an in-run baseline row into the baseline object.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any


def percentile(samples: list[float], q: float) -> float:
    """Nearest-rank percentile of `samples` (q in 0..100)."""
    if not samples:
        return float("nan")
    ordered = sorted(samples)
    rank = max(0, min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1))))
    return ordered[rank]


def time_calls(fn: Callable[[], Any], n: int, warmup: int = 50) -> list[float]:
    """Call fn n times (after warmup) and return per-call latencies in microseconds."""
    for _ in range(warmup):
        fn()
    clock = time.perf_counter_ns
    out: list[float] = []
    for _ in range(n):
        t0 = clock()
        fn()
        out.append((clock() - t0) / 1000.0)
    return out


def baseline(name: str, row: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """The issue-13 baseline object from a measured row: name, p50_us, p99_us, ops_per_s."""
    return {
        "name": name,
        "p50_us": row["p50_us"],
        "p99_us": row["p99_us"],
        "ops_per_s": row["ops_per_s"],
        **extra,
    }


def result(
    name: str,
    params: dict[str, Any],
    samples_us: list[float],
    baseline: dict[str, Any] | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One results.json row from latency samples in microseconds."""
    mean = statistics.fmean(samples_us) if samples_us else float("nan")
    return {
        "name": name,
        "params": params,
        "p50_us": round(percentile(samples_us, 50), 3),
        "p99_us": round(percentile(samples_us, 99), 3),
        "ops_per_s": round(1e6 / mean, 1) if mean > 0 else None,
        "baseline": baseline,
        "extra": extra or {},
    }
