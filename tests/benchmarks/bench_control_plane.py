"""Control-plane throughput through the real domain and application with in-memory fakes.

- first_fit placement latency on 128 nodes x 8 GPUs (1,024 GPUs) at 0% / 50% / 90% occupancy;
- submit latency (command applied and persisted) with the in-memory store and with SQLite,
  the durable store `serve` uses (fsync per command: this is the cost of "nothing lost").
"""

from __future__ import annotations

import random
import tempfile
import time
from pathlib import Path
from typing import Any

from _harness import baseline, result, time_calls

from gpu_platform.adapters.outbound.sim.inventory import build_node
from gpu_platform.adapters.outbound.storage import SqliteJobStore
from gpu_platform.application.control_plane import ControlPlane
from gpu_platform.domain.model.job import JobSpec
from gpu_platform.domain.model.node import Inventory
from gpu_platform.domain.placement import NodeView, PlacementRequest, first_fit
from gpu_platform.ports.outbound.job_store import JobStore
from gpu_platform.testing.fakes import (
    FakeJobRunner,
    InMemoryJobStore,
    ManualClock,
    RecordingPublisher,
    SequentialJobIds,
)


def cluster(nodes: int) -> Inventory:
    return Inventory(
        tuple(build_node(f"n{i:04d}", 8, numa_nodes=2) for i in range(nodes)),
        source="bench",
        simulated=True,
    )


def views(inv: Inventory, occupancy: float, rng: random.Random) -> list[NodeView]:
    out = []
    for node in inv.nodes:
        free = tuple(g for g in node.gpus if rng.random() >= occupancy)
        out.append(NodeView(node.name, free))
    return out


def bench_first_fit(quick: bool) -> list[dict[str, Any]]:
    rows = []
    inv = cluster(128)
    rng = random.Random(42)
    n = 2_000 if quick else 20_000
    for occupancy in (0.0, 0.5, 0.9):
        snapshot = views(inv, occupancy, rng)
        for gpus in (1, 8):
            req = PlacementRequest(gpus)
            samples = time_calls(lambda r=req, s=snapshot: first_fit(r, s), n)
            rows.append(
                result(
                    "placement.decision",
                    {
                        "policy": "first_fit",
                        "gpus": 1024,
                        "nodes": 128,
                        "request": f"{gpus}-gpu",
                        "occupancy": occupancy,
                    },
                    samples,
                )
            )
    return rows


def plane(store: JobStore) -> ControlPlane:
    return ControlPlane(
        cluster(128),
        store,
        FakeJobRunner(),
        ManualClock(),
        SequentialJobIds(),
        RecordingPublisher(),
    )


def bench_submit(quick: bool) -> list[dict[str, Any]]:
    rows = []
    n = 300 if quick else 2_000
    spec = JobSpec(("fake-forever",), gpus=1)
    memory = plane(InMemoryJobStore())
    mem_samples = time_calls(lambda: memory.submit(spec), n)
    with tempfile.TemporaryDirectory() as tmp:
        store = SqliteJobStore(Path(tmp) / "state.db")
        durable = plane(store)
        sql_samples = time_calls(lambda: durable.submit(spec), n, warmup=10)
        store.close()
    mem = result("control_plane.submit", {"store": "memory", "jobs": n}, mem_samples)
    rows.append(mem)
    rows.append(
        result(
            "control_plane.submit",
            {"store": "sqlite(synchronous=FULL)", "jobs": n},
            sql_samples,
            baseline=baseline("in-memory store", mem),
        )
    )
    return rows


def bench_schedule_cycle(quick: bool) -> list[dict[str, Any]]:
    jobs = 512 if quick else 1_024
    cp = plane(InMemoryJobStore())
    for _ in range(jobs):
        cp.submit(JobSpec(("fake-forever",), gpus=1))

    t0 = time.perf_counter_ns()
    launched = cp.schedule_once()
    elapsed_us = (time.perf_counter_ns() - t0) / 1000
    per_job = [elapsed_us / max(1, launched)]
    return [
        result(
            "control_plane.schedule_cycle",
            {"policy": "fifo", "queued": jobs, "gpus": 1024, "launched": launched},
            per_job,
            extra={"cycle_ms": round(elapsed_us / 1000, 2)},
        )
    ]


def run(quick: bool = False) -> list[dict[str, Any]]:
    return bench_first_fit(quick) + bench_submit(quick) + bench_schedule_cycle(quick)
