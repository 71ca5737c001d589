"""The replicated cluster state (issue 10): apply latency per log entry, and snapshot/restore
time, at 10,000 jobs (1,000 in quick mode) on 64 nodes x 8 GPUs.

The cluster is built through the replica itself: RegisterNode for every node, then SubmitJob
for every job and BindJob + StartJob for as many as fit (512 GPUs held). `replica.apply` is one
sample per entry (decode the envelope, dedupe, apply) over a mixed stream on the full cluster:
submit, cancel and heartbeat entries. `replica.snapshot` and `replica.restore` time the whole
state (the snapshot of a just-restored replica, which has no job's bytes kept yet);
`replica.snapshot.incremental` is the next snapshot of the live replica after a tenth as many
entries again (jobs unchanged since the last snapshot reuse their bytes: `snapshot_encoding`);
`extra.bytes` is the snapshot size. Baseline: `ClusterState.apply` on the same commands
without the envelope (the cost of the log format and the dedupe window).
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from typing import Any

from _harness import baseline, result

from gpu_platform.application.cluster_replica import ClusterReplica
from gpu_platform.domain.cluster_state import (
    BindJob,
    CancelJob,
    ClusterState,
    Command,
    NodeHeartbeat,
    RegisterNode,
    StartJob,
    SubmitJob,
)
from gpu_platform.domain.errors import DomainError
from gpu_platform.domain.faults.policy import FaultPolicy
from gpu_platform.domain.model.gpu import Gpu, Vendor
from gpu_platform.domain.model.job import JobSpec
from gpu_platform.domain.model.node import Node

NODES = 64
GPUS = 8


def _node(i: int) -> Node:
    name = f"n{i:03d}"
    gpus = tuple(
        Gpu(f"GPU-{name}-{g}", g, name, Vendor.NVIDIA, "H100", 80 << 30, numa_node=g // 4)
        for g in range(GPUS)
    )
    return Node(name, gpus, labels=(("rack", f"r{i // 16}"),))


def _build(jobs: int) -> tuple[ClusterReplica, int]:
    r = ClusterReplica(FaultPolicy(), threading.RLock())
    index = 0

    def feed(cmd: Command) -> None:
        nonlocal index
        index += 1
        r.apply(index, r.encode(cmd, f"b{index}"))

    for i in range(NODES):
        feed(RegisterNode(_node(i), 0.0))
    for j in range(jobs):
        feed(SubmitJob(f"job-{j}", JobSpec(("train",), gpus=1, tenant=f"t{j % 7}"), 1.0))
    epoch = 1
    for j in range(min(jobs, NODES * GPUS)):
        feed(BindJob(f"job-{j}", f"n{j // GPUS:03d}", (j % GPUS,), 2.0))
        feed(StartJob(f"job-{j}", epoch, 3.0))
        epoch += 1
    return r, index


def _stream(jobs: int, n: int) -> list[Command]:
    cmds: list[Command] = []
    for k in range(n):
        match k % 3:
            case 0:
                cmds.append(SubmitJob(f"new-{k}", JobSpec(("x",), gpus=1), 4.0))
            case 1:
                cmds.append(CancelJob(f"job-{jobs - 1 - k}", 4.0))
            case _:
                cmds.append(NodeHeartbeat(f"n{k % NODES:03d}", 4.0))
    return cmds


def _time_each(fn: Any, items: list[Any]) -> list[float]:
    clock = time.perf_counter_ns
    out = []
    for item in items:
        t0 = clock()
        fn(item)
        out.append((clock() - t0) / 1000.0)
    return out


def run(quick: bool) -> list[dict[str, Any]]:
    jobs = 1_000 if quick else 10_000
    n = 300 if quick else 3_000
    params = {"jobs": jobs, "nodes": NODES, "gpus_per_node": GPUS, "entries": n}

    r, index = _build(jobs)
    plain = ClusterState.from_parts(r.state.parts(), FaultPolicy())
    cmds = _stream(jobs, n)
    data = [r.encode(c, f"s{k}") for k, c in enumerate(cmds)]
    counter = itertools.count(index + 1)
    apply_us = _time_each(lambda d: r.apply(next(counter), d), data)

    def direct(c: Command) -> None:
        with contextlib.suppress(DomainError):  # refusals cost the same in both
            plain.apply(c)

    base = result("replica.apply.direct", params, _time_each(direct, cmds))

    reps = 3 if quick else 5
    snaps: list[float] = []
    restores: list[float] = []
    warm: list[float] = []
    blob = r.snapshot()
    for rep in range(reps):
        other = ClusterReplica(FaultPolicy(), threading.RLock())
        t0 = time.perf_counter_ns()
        other.restore(blob)
        restores.append((time.perf_counter_ns() - t0) / 1000.0)
        t0 = time.perf_counter_ns()
        blob = other.snapshot()  # nothing kept yet: every job encoded
        snaps.append((time.perf_counter_ns() - t0) / 1000.0)
        more = [r.encode(c, f"w{rep}-{k}") for k, c in enumerate(_stream(jobs, n // 10))]
        for d in more:
            r.apply(next(counter), d)
        t0 = time.perf_counter_ns()
        r.snapshot()  # the jobs unchanged since the last snapshot reuse their bytes
        warm.append((time.perf_counter_ns() - t0) / 1000.0)
    size = {"bytes": len(blob), "jobs_in_state": len(r.state.jobs())}
    cold = result("replica.snapshot", params, snaps, extra=size)
    return [
        result(
            "replica.apply",
            params,
            apply_us,
            baseline=baseline("ClusterState.apply without envelope or dedupe", base),
        ),
        cold,
        result(
            "replica.snapshot.incremental",
            params | {"entries_since_last": n // 10},
            warm,
            baseline=baseline("the same snapshot with nothing kept", cold),
        ),
        result("replica.restore", params, restores, extra=size),
    ]
