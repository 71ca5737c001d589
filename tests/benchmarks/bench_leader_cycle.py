"""What the live server pays per scheduling cycle, not just `place()` on a pre-built view.

`scheduler.live_cycle`: one sample = one leader cycle over a `ClusterState` of 128 nodes /
1,024 GPUs and 1,024 nodes / 8,192 GPUs (alternating simulated DGX-H100 and 8x-PCIe hosts with
their topologies), kept near 50 % occupancy by churn: before each cycle 8 running jobs end
and 8 jobs (1, 2 or 4 GPUs) are submitted; the cycle's binds are applied to the state
afterwards (untimed), so every cycle sees a state that changed. The timed part is what
`ControlPlane.schedule_once` does before committing: bring the placement view up to the
state, list the running jobs and the queue, and `decide`. Two ways on the same states, in
the same run (samples are the thread's CPU time, so a shared machine's preemptions do not
count):

* `live` (params.view = "live"): one `LiveView` synced with the nodes that changed, hardware
  classes cached per hardware type, running jobs' placements built once per attempt;
* the baseline, `rebuild`: the view rebuilt from scratch every cycle (with each node's
  topology matrix cached per node, as the control plane did), running jobs re-listed from
  every job.

`extra.resets_due_scan_us` / `resets_due_index_us`: one `resets_due()` by a scan of every GPU
(what ran after every committed command) and by the RESETTING index the state keeps now.
"""

from __future__ import annotations

import os
import random
import time
from typing import Any

from _harness import percentile, result

from gpu_platform.adapters.outbound.sim.profiles import profile_node
from gpu_platform.application.control_plane import request_of
from gpu_platform.domain.cluster_state import BindJob, ClusterState, FinishJob, SubmitJob
from gpu_platform.domain.model.gpu import GpuState
from gpu_platform.domain.model.job import Job, JobSpec, JobState
from gpu_platform.domain.model.node import Inventory, Node, NodeState
from gpu_platform.domain.placement import ClusterView, GpuShare, Score, TaskPlacement
from gpu_platform.domain.scheduling import PendingJob, RunningJob, SchedulerPolicy, decide
from gpu_platform.domain.scheduling.live_view import LiveView
from gpu_platform.domain.topology.matrix import TopologyMatrix, build_matrix

_NO_SCORE = Score(0, 0, 0, 0.0, 0, False)
SHAPES = (1, 1, 1, 2, 4)


def cluster(n: int) -> list[Node]:
    profiles = ("dgx-h100", "hgx-8x-pcie")
    return [
        profile_node(profiles[i % 2], f"n{i:04d}", {"leaf": f"leaf{i // 16}", "rack": f"rack{i // 32}"})
        for i in range(n)
    ]  # fmt: skip


def _tasks(state: ClusterState, job: Job) -> tuple[TaskPlacement, ...]:
    assert job.allocation is not None
    out = []
    for slot in job.allocation.tasks:
        node = state.node(slot.node)
        shares = tuple(GpuShare(node.gpu(i), 1000) for i in slot.gpu_indices)
        out.append(TaskPlacement(slot.node, shares, slot.numa_nodes, (), _NO_SCORE))
    return tuple(out)


def _running(job: Job, tasks: tuple[TaskPlacement, ...], now: float) -> RunningJob:
    started = job.started_at if job.started_at is not None else now
    return RunningJob(job.id, job.spec.tenant, tasks, started, submitted_at=job.submitted_at)


def _pending(job: Job) -> PendingJob:
    return PendingJob(job.id, job.spec.tenant, request_of(job.spec), job.submitted_at, job.seq)


class Rebuild:
    """The cycle as it was: a fresh view and running list every time."""

    def __init__(self) -> None:
        self._matrices: dict[str, tuple[object, TopologyMatrix]] = {}

    def _matrix(self, node: Node) -> TopologyMatrix | None:
        if node.topology is None:
            return None
        cached = self._matrices.get(node.name)
        if cached is None or cached[0] is not node.topology:
            cached = self._matrices[node.name] = (node.topology, build_matrix(node.topology))
        return cached[1]

    def inputs(self, state: ClusterState, now: float) -> tuple[ClusterView, list[RunningJob]]:
        free = {v.name: [g.index for g in v.free] for v in state.node_views()}
        ready = [n for n in state.nodes if n.name in free]
        view = ClusterView.from_free(ready, free, matrix_of=self._matrix)
        running = [_running(j, _tasks(state, j), now) for j in state.jobs() if j.holds_gpus]
        return view, running


class Live:
    """The cycle now: one view kept in step, placements of running attempts cached."""

    def __init__(self) -> None:
        self.live = LiveView()
        self._tasks: dict[tuple[str, int], tuple[TaskPlacement, ...]] = {}

    def inputs(self, state: ClusterState, now: float) -> tuple[ClusterView, list[RunningJob]]:
        view = self.live.sync(state)
        kept: dict[tuple[str, int], tuple[TaskPlacement, ...]] = {}
        running = []
        for job in state.open_jobs():
            if job.holds_gpus and job.allocation is not None:
                key = (job.id, job.allocation.epoch)
                kept[key] = self._tasks.get(key) or _tasks(state, job)
                running.append(_running(job, kept[key], now))
        self._tasks = kept
        return view, running


def _cycle(way: Rebuild | Live, state: ClusterState, now: float) -> tuple[float, dict[str, Any]]:
    t0 = time.thread_time_ns()  # CPU time: a shared machine's preemptions left out
    view, running = way.inputs(state, now)
    pending = [_pending(j) for j in state.queued(now)]
    decision = decide(now, pending, running, view, {}, SchedulerPolicy())
    return (time.thread_time_ns() - t0) / 1000.0, dict(decision.binds)


def _apply_binds(state: ClusterState, binds: dict[str, Any], now: float) -> None:
    for job_id, placed in binds.items():
        slots = [(t.node, tuple(s.gpu.index for s in t.gpus)) for t in placed.tasks]
        (node, gpus), peers = slots[0], tuple(slots[1:])
        state.apply(BindJob(job_id, node, gpus, now, peers=peers))


def _churn(state: ClusterState, rng: random.Random, seq: int, now: float, n: int) -> int:
    holding = [j for j in state.open_jobs() if j.holds_gpus and j.allocation is not None]
    for job in rng.sample(holding, min(n, len(holding))):
        assert job.allocation is not None
        state.apply(FinishJob(job.id, job.allocation.epoch, 0, now))
    for _ in range(n):
        seq += 1
        spec = JobSpec(("x",), gpus=rng.choice(SHAPES))
        state.apply(SubmitJob(f"j{seq}", spec, now))
    return seq


def _resets_scan(state: ClusterState) -> list[object]:
    return [
        g
        for n in state.nodes
        for g in n.gpus
        if g.state is GpuState.RESETTING and state.holder(g) is None
    ]


def _time_us(fn: Any, n: int) -> float:
    t0 = time.thread_time_ns()
    for _ in range(n):
        fn()
    return (time.thread_time_ns() - t0) / 1000.0 / n


def run(quick: bool) -> list[dict[str, Any]]:
    smoke = os.environ.get("GPU_PLATFORM_BENCH_SMOKE") == "1"
    sizes = (16,) if smoke else (128,) if quick else (128, 1024)
    cycles = 10 if smoke else 60 if quick else 200
    rows = []
    for size in sizes:
        nodes = cluster(size)
        state = ClusterState(Inventory(tuple(nodes), source="bench", simulated=True))
        rng = random.Random(size)
        seq, now = 0, 0.0
        live, rebuild = Live(), Rebuild()
        seq = _churn(state, rng, seq, now, size * 8 // 4)  # fill towards half the GPUs
        _apply_binds(state, _cycle(live, state, now)[1], now)
        samples: dict[str, list[float]] = {"live": [], "rebuild": []}
        for _ in range(cycles):
            now += 1.0
            seq = _churn(state, rng, seq, now, 8)
            for name, way in (("rebuild", rebuild), ("live", live)):
                took, binds = _cycle(way, state, now)
                samples[name].append(took)
            _apply_binds(state, binds, now)
        busy = sum(1 for n in state.nodes for g in n.gpus if state.holder(g) is not None)
        scan = _time_us(lambda state=state: _resets_scan(state), 20)
        index = _time_us(state.resets_due, 200)
        base = result("scheduler.live_cycle", {}, samples["rebuild"])
        rows.append(
            result(
                "scheduler.live_cycle",
                {"view": "live", "nodes": size, "gpus": size * 8, "cycles": cycles},
                samples["live"],
                baseline={
                    "name": "view rebuilt every cycle",
                    "p50_us": base["p50_us"],
                    "p99_us": base["p99_us"],
                    "ops_per_s": base["ops_per_s"],
                },
                extra={
                    "occupancy": round(busy / (size * 8), 2),
                    "ready_nodes": sum(1 for n in state.nodes if n.state is NodeState.READY),
                    "open_jobs": len(state.open_jobs()),
                    "jobs": len(state.jobs()),
                    "rebuild_mean_us": round(sum(samples["rebuild"]) / cycles, 1),
                    "live_mean_us": round(sum(samples["live"]) / cycles, 1),
                    "live_p90_us": round(percentile(samples["live"], 90), 1),
                    "resets_due_scan_us": round(scan, 2),
                    "resets_due_index_us": round(index, 2),
                    "queued_after": sum(1 for j in state.open_jobs() if j.state is JobState.QUEUED),
                },
            )
        )
    return rows


if __name__ == "__main__":
    import json
    import sys

    print(json.dumps(run("--quick" in sys.argv), indent=2))
