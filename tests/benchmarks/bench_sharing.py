"""Shares of one GPU placed through the production path (issue 22).

`placement.fractional`: one sample = one `place()` of a share of one GPU (250 or 500 milli-GPU,
half of them pinning 10 GiB) on the leader's `LiveView` kept in step with a `ClusterState` of
128 nodes / 1,024 GPUs and 1,024 nodes / 8,192 GPUs (alternating simulated DGX-H100 and
8x-PCIe hosts with their topologies), the request built as the control plane builds it
(`request_of`, memory as a fraction of the smallest GPU that holds it). Before each sample a
random running job ends and the view is synced (untimed; its p99 is `extra.sync_p99_us`);
after it the placement is bound in the state (`BindJob`, which re-validates shares, memory and
CPU), so every sample sees a changed cluster kept at about 60 % of its milli-GPU in use, by a
mix of shares and whole-GPU jobs. Samples are the thread's CPU time (a shared machine's
preemptions do not count).

Baseline (same run, same states): a whole 1-GPU request placed the same way. `extra`:
binds the state refused (should be 0), shared GPUs and shares at the end, occupancy.
"""

from __future__ import annotations

import os
import random
import time
from dataclasses import replace
from typing import Any

from _harness import percentile, result

from gpu_platform.adapters.outbound.sim.profiles import profile_node
from gpu_platform.application.control_plane import request_of
from gpu_platform.application.sharing import placement_milli
from gpu_platform.domain.cluster_state import BindJob, ClusterState, FinishJob, SubmitJob
from gpu_platform.domain.errors import Conflict
from gpu_platform.domain.model.job import JobSpec
from gpu_platform.domain.model.node import Inventory, Node
from gpu_platform.domain.placement import GangPlacement, GpuRequest, place
from gpu_platform.domain.scheduling.live_view import LiveView

GIB = 1 << 30


def cluster(n: int) -> list[Node]:
    profiles = ("dgx-h100", "hgx-8x-pcie")
    return [
        profile_node(profiles[i % 2], f"n{i:04d}", {"leaf": f"leaf{i // 16}", "rack": f"rack{i // 32}"})
        for i in range(n)
    ]  # fmt: skip


def share_spec(rng: random.Random) -> JobSpec:
    memory = 10 * GIB if rng.random() < 0.5 else None
    return JobSpec(("x",), gpus=1, gpu_milli=rng.choice((250, 500)), gpu_memory_bytes=memory)


def request(spec: JobSpec, sizes: list[int]) -> GpuRequest:
    """The placement request as `control.scheduling.Scheduling._pending_job` builds it."""
    r = request_of(spec)
    if r.fractional and spec.gpu_memory_bytes is not None:
        r = replace(r, gpu_milli=placement_milli(spec, sizes))
    return r


class Sizing:
    def __init__(self, size: int, seed: int) -> None:
        nodes = cluster(size)
        self.state = ClusterState(Inventory(tuple(nodes), source="bench", simulated=True))
        self.live = LiveView()
        self.sizes = sorted({g.memory_bytes for n in nodes for g in n.gpus})
        self.rng = random.Random(seed)
        self.seq = 0
        self.refused = 0
        self.capacity = size * 8 * 1000
        self.used = 0  # milli-GPU held by bound jobs

    def submit_and_bind(self, spec: JobSpec, timed: list[float] | None = None) -> None:
        self.seq += 1
        job_id = f"j{self.seq}"
        self.state.apply(SubmitJob(job_id, spec, 0.0))
        view = self.live.sync(self.state)
        req = request(spec, self.sizes)
        t0 = time.thread_time_ns()
        placed = place(req, view)
        took = (time.thread_time_ns() - t0) / 1000.0
        if timed is not None:
            timed.append(took)
        if not isinstance(placed, GangPlacement):
            return
        task = placed.tasks[0]
        try:
            self.state.apply(BindJob(job_id, task.node, tuple(s.gpu.index for s in task.gpus), 0.0))
        except Conflict:
            self.refused += 1
            return
        self.used += spec.gpus * spec.gpu_milli

    def finish_one(self) -> None:
        holding = [j for j in self.state.open_jobs() if j.holds_gpus and j.allocation is not None]
        if holding:
            job = self.rng.choice(holding)
            assert job.allocation is not None
            self.state.apply(FinishJob(job.id, job.allocation.epoch, 0, 0.0))
            self.used -= job.spec.gpus * job.spec.gpu_milli

    def fill(self, target: float) -> None:
        while self.used < target * self.capacity:
            if self.rng.random() < 0.5:
                self.submit_and_bind(share_spec(self.rng))
            else:
                self.submit_and_bind(JobSpec(("x",), gpus=self.rng.choice((1, 2))))


def run(quick: bool) -> list[dict[str, Any]]:
    smoke = os.environ.get("GPU_PLATFORM_BENCH_SMOKE") == "1"
    sizes = (16,) if smoke else (128,) if quick else (128, 1024)
    samples_n = 50 if smoke else 300 if quick else 1000
    rows = []
    for size in sizes:
        s = Sizing(size, seed=size)
        s.fill(0.6)
        fractional: list[float] = []
        whole: list[float] = []
        sync: list[float] = []
        for i in range(samples_n):
            s.finish_one()
            t0 = time.thread_time_ns()
            s.live.sync(s.state)
            sync.append((time.thread_time_ns() - t0) / 1000.0)
            if i % 2 == 0:
                s.submit_and_bind(share_spec(s.rng), fractional)
            else:
                s.submit_and_bind(JobSpec(("x",), gpus=1), whole)
        s.state.check_invariants()
        book = s.state.share_book
        base = result("placement.fractional", {}, whole)
        rows.append(
            result(
                "placement.fractional",
                {"gpus": size * 8, "nodes": size, "path": "LiveView + ClusterState"},
                fractional,
                baseline={
                    "name": "whole 1-GPU request, same run",
                    "p50_us": base["p50_us"],
                    "p99_us": base["p99_us"],
                    "ops_per_s": base["ops_per_s"],
                },
                extra={
                    "samples": len(fractional),
                    "sync_p99_us": round(percentile(sync, 99), 1),
                    "binds_refused": s.refused,
                    "shared_gpus": len(book.gpus),
                    "shares": sum(len(v) for v in book.gpus.values()),
                    "occupancy_milli": round(s.used / s.capacity, 2),
                },
            )
        )
    return rows


if __name__ == "__main__":
    import json
    import sys

    print(json.dumps(run("--quick" in sys.argv), indent=2))
