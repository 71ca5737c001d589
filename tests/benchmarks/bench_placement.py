"""Placement decision latency: p50/p99 of `place(request, view)` for 1-GPU, fractional
(0.5 GPU), 8-GPU and 4x8-GPU gang requests, on clusters of 128 nodes / 1,024 GPUs and
1,024 nodes / 8,192 GPUs (alternating simulated DGX-H100 and 8x-PCIe hosts, 16 nodes per
leaf, 32 per rack), at 0 %, 50 % and 90 % GPU occupancy.

Occupancy is reached by placing and binding a random mix (1 GPU, 0.25/0.5 GPU, 2 and 4 GPUs)
through the engine itself. One sample = one `place()` call, timed with perf_counter_ns (and
the thread's CPU time beside it, `extra.cpu_p50_us` / `cpu_p99_us`: on a shared machine a
preemption inflates the wall-clock p99 of the longer gang calls, not their CPU time); after
each sample the result is bound and released again (untimed), so the next decision sees a
view that changed and must catch up incrementally - what a scheduler loop does. The in-run
baseline is the foundation's `first_fit` for the same 1-GPU request over the same cluster.
"""

from __future__ import annotations

import random
import time
from typing import Any

from _harness import percentile, result

from gpu_platform.adapters.outbound.sim.profiles import profile_node
from gpu_platform.domain.model.node import Node
from gpu_platform.domain.placement import NodeView, PlacementRequest, first_fit
from gpu_platform.domain.placement.engine import place
from gpu_platform.domain.placement.request import GangPlacement, GpuRequest
from gpu_platform.domain.placement.view import ClusterView

REQUESTS = {
    "1gpu": GpuRequest(1, cpu_milli=8000, memory_bytes=32 << 30),
    "fractional": GpuRequest(1, gpu_milli=500, cpu_milli=4000, memory_bytes=16 << 30),
    "8gpu": GpuRequest(8, cpu_milli=64000, memory_bytes=256 << 30),
    "gang4x8": GpuRequest(8, tasks=4, cpu_milli=64000, memory_bytes=256 << 30),
}
FILL = (
    GpuRequest(1, cpu_milli=4000),
    GpuRequest(1, gpu_milli=250, cpu_milli=2000),
    GpuRequest(1, gpu_milli=500, cpu_milli=2000),
    GpuRequest(2, cpu_milli=8000),
    GpuRequest(4, cpu_milli=16000),
)


def cluster(n: int) -> list[Node]:
    profiles = ("dgx-h100", "hgx-8x-pcie")
    return [
        profile_node(
            profiles[i % 2], f"n{i:04d}", {"leaf": f"leaf{i // 16}", "rack": f"rack{i // 32}"}
        )
        for i in range(n)
    ]


def fill(view: ClusterView, occupancy: float, rng: random.Random) -> float:
    total = sum(len(s.free) * 1000 for s in view.slots.values())
    used = 0
    misses = 0
    while used < occupancy * total and misses < 50:
        request = rng.choice(FILL)
        got = place(request, view)
        if not isinstance(got, GangPlacement):
            misses += 1
            continue
        for task in got.tasks:
            view.bind(task, request.cpu_milli, request.memory_bytes)
        used += request.gpus * request.gpu_milli
    return used / total


def sample(
    view: ClusterView, request: GpuRequest, n: int, cpu: list[float] | None = None
) -> list[float]:
    """Wall-clock latencies (µs); `cpu`, when given, gets the thread's CPU time per call,
    which a preemption on a shared machine does not inflate."""
    clock, thread = time.perf_counter_ns, time.thread_time_ns
    out = []
    for _ in range(n):
        t0 = clock()
        c0 = thread()
        got = place(request, view)
        c1 = thread()
        out.append((clock() - t0) / 1000.0)
        if cpu is not None:
            cpu.append((c1 - c0) / 1000.0)
        if isinstance(got, GangPlacement):
            for task in got.tasks:
                view.bind(task, request.cpu_milli, request.memory_bytes)
            for task in got.tasks:
                view.release(task, request.cpu_milli, request.memory_bytes)
    return out


def run(quick: bool) -> list[dict[str, Any]]:
    sizes = (128,) if quick else (128, 1024)
    occupancies = (0.0, 0.9) if quick else (0.0, 0.5, 0.9)
    n = 200 if quick else 2000
    rows = []
    for size in sizes:
        nodes = cluster(size)
        for occupancy in occupancies:
            view = ClusterView(nodes)
            reached = fill(view, occupancy, random.Random(size))
            snapshot = [
                NodeView(
                    s.node.name,
                    tuple(
                        g for g, f in zip(view.classes[s.hw].gpus, s.free, strict=True) if f == 1000
                    ),
                )
                for s in view.slots.values()
            ]
            base = sample_first_fit(snapshot, n)
            for name, request in REQUESTS.items():
                cpu: list[float] = []
                samples = sample(view, request, n if name != "gang4x8" else max(50, n // 10), cpu)
                got = place(request, view)
                rows.append(
                    result(
                        "placement.decision",
                        {
                            "policy": "default",
                            "gpus": size * 8,
                            "nodes": size,
                            "request": name,
                            "occupancy": round(reached, 2),
                        },
                        samples,
                        baseline={
                            "name": "first_fit, 1 GPU",
                            "p50_us": base[0],
                            "p99_us": base[1],
                        },
                        extra={
                            "placed": isinstance(got, GangPlacement),
                            "cpu_p50_us": round(percentile(cpu, 50), 3),
                            "cpu_p99_us": round(percentile(cpu, 99), 3),
                        },
                    )
                )
    return rows


def sample_first_fit(snapshot: list[NodeView], n: int) -> tuple[float, float]:
    clock = time.perf_counter_ns
    out = []
    for _ in range(n):
        t0 = clock()
        first_fit(PlacementRequest(1), snapshot)
        out.append((clock() - t0) / 1000.0)
    out.sort()
    return round(out[len(out) // 2], 3), round(out[min(len(out) - 1, int(0.99 * len(out)))], 3)
