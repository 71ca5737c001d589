"""A scheduling cycle over a deep queue (issue 21): what `ControlPlane.schedule_once` costs in
CPU when the cluster is full and N jobs wait (as after a large job array is submitted).

`scheduler.deep_queue_cycle`: 16 simulated nodes (128 GPUs) held by running jobs, N queued
1-GPU jobs, one sample = the thread's CPU time of one cycle (nothing binds, every job keeps
its reason). Two ways in the same run, alternated cycle by cycle: `kept` (the decision's
entry of each queued job kept from the last cycle while the job and its nomination are the
same, what the server does) and the baseline `fresh` (every entry made again each cycle, the
cycle before 2026-11-26: the kept entries are dropped before each of its cycles).
"""

from __future__ import annotations

import os
import time
from typing import Any

from _harness import result

from gpu_platform.adapters.outbound.sim import default_node
from gpu_platform.application.control_plane import ControlPlane
from gpu_platform.domain.model.job import JobSpec
from gpu_platform.domain.model.node import Inventory
from gpu_platform.testing.fakes import (
    FakeJobRunner,
    InMemoryJobStore,
    ManualClock,
    RecordingPublisher,
    SequentialJobIds,
)


def _plane(nodes: int, queued: int) -> tuple[ControlPlane, ManualClock]:
    inventory = Inventory(
        tuple(default_node(f"n{i}") for i in range(nodes)), source="sim", simulated=True
    )
    clock = ManualClock()
    plane = ControlPlane(
        inventory, InMemoryJobStore(), FakeJobRunner(), clock, SequentialJobIds(),
        RecordingPublisher(),
    )  # fmt: skip
    for _ in range(nodes):
        plane.submit(JobSpec(("fake-forever",), gpus=8))
    plane.schedule_once()  # the cluster is full
    for _ in range(queued):
        plane.submit(JobSpec(("fake-forever",), gpus=1))
    return plane, clock


def _cycle_us(plane: ControlPlane, clock: ManualClock, *, fresh: bool) -> float:
    if fresh:
        plane._scheduling._entries.clear()
    clock.advance(1)
    started = time.thread_time()
    plane.schedule_once()
    return (time.thread_time() - started) * 1e6


def run(quick: bool) -> list[dict[str, Any]]:
    smoke = os.environ.get("GPU_PLATFORM_BENCH_SMOKE") == "1"
    sizes = (200,) if smoke else (5_000,) if quick else (5_000, 20_000)
    cycles = 3 if smoke else 10
    rows = []
    for queued in sizes:
        plane, clock = _plane(16, queued)
        _cycle_us(plane, clock, fresh=False)  # warm: the first cycle makes every entry
        kept: list[float] = []
        fresh: list[float] = []
        for _ in range(cycles):
            fresh.append(_cycle_us(plane, clock, fresh=True))
            kept.append(_cycle_us(plane, clock, fresh=False))
        params = {"nodes": 16, "gpus": 128, "queued": queued, "cycles": cycles}
        base = result("scheduler.deep_queue_cycle", {**params, "entries": "fresh"}, fresh)
        rows.append(
            result(
                "scheduler.deep_queue_cycle",
                {**params, "entries": "kept"},
                kept,
                baseline={
                    "name": "fresh entries every cycle",
                    "p50_us": base["p50_us"],
                    "p99_us": base["p99_us"],
                    "ops_per_s": base["ops_per_s"],
                },
                extra={"load_average": [round(x, 2) for x in os.getloadavg()]},
            )
        )
    return rows


if __name__ == "__main__":
    import json

    print(json.dumps(run(quick=False), indent=2))
