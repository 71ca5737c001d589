"""The scheduler's domain decision (`domain.scheduling.decide`), without the control plane.

- `scheduler.throughput`: jobs bound per second by one `decide()` cycle with 10,000 queued
  jobs (the workload generator's size mix: 1-8 GPUs and 2x8 / 4x8 gangs) on 128 x 8 = 1,024
  free GPUs, per policy; p50/p99 are microseconds per bound job over the repetitions. Plus a
  steady-state row: the same queue on a full cluster where 16 jobs have just ended (one cycle
  per sample; p50/p99 = microseconds per cycle), examining at most `max_jobs` jobs (the
  default 1,000, and all of them).
- `scheduler.utilization`: the arrivals/departures simulation (`domain.simulation.arrivals`)
  on 32 x 8 = 256 GPUs, offered load 1.2, jobs from `domain.simulation.workload` (calibrated
  to the Helios/Tiresias summaries), per policy and seed. `extra.alloc_pct` = mean GPU
  allocation while the queue is non-empty (whole run; `arrivals_alloc_pct` up to the last
  arrival), queueing delay and JCT p50/p99 in seconds of simulated time; p50/p99 here are
  microseconds per scheduling cycle inside the simulation.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterable, Mapping
from typing import Any

from _harness import result

from gpu_platform.domain.placement import ClusterView, GpuRequest
from gpu_platform.domain.scheduling import (
    Decision,
    PendingJob,
    QueueOrder,
    Quota,
    RunningJob,
    SchedulerPolicy,
    decide,
)
from gpu_platform.domain.simulation.arrivals import simulate, uniform_cluster
from gpu_platform.domain.simulation.workload import WorkloadParams, generate

AGING = {"order": QueueOrder.PRIORITY, "aging_rate": 1 / 600, "aging_bound_s": 6 * 3600.0}
POLICIES: dict[str, SchedulerPolicy] = {
    "fifo": SchedulerPolicy(),
    "priority+aging": SchedulerPolicy(**AGING),
    "drf": SchedulerPolicy(**AGING, fair_share=True),
    "drf+backfill": SchedulerPolicy(**AGING, fair_share=True, backfill=True),
    "drf+backfill+preemption": SchedulerPolicy(
        **AGING, fair_share=True, backfill=True, preemption=True
    ),
}


def queued_jobs(n: int, gpus: int, seed: int = 1) -> list[PendingJob]:
    return [
        PendingJob(
            j.id,
            j.tenant,
            GpuRequest(gpus=j.gpus_per_task, tasks=j.tasks),
            j.submit_s,
            i,
            priority=j.priority,
            runtime_estimate_s=j.time_limit_s,
        )
        for i, j in enumerate(generate(n, gpus, random.Random(seed)))
    ]


def bench_throughput(quick: bool) -> list[dict[str, Any]]:
    queued, nodes, reps = 10_000, 128, (2 if quick else 5)
    jobs = queued_jobs(queued, nodes * 8)
    now = max(j.submitted_at for j in jobs) + 1.0
    rows = []
    for name in ("fifo", "drf+backfill+preemption"):
        policy = SchedulerPolicy(**{**_fields(POLICIES[name]), "max_jobs": queued})
        per_job: list[float] = []
        cycles_ms: list[float] = []
        bound = 0
        for _ in range(reps):
            view = ClusterView(uniform_cluster(nodes))
            t0 = time.perf_counter_ns()
            d = decide(now, jobs, (), view, {}, policy)
            elapsed_us = (time.perf_counter_ns() - t0) / 1000
            bound = len(d.binds)
            per_job.append(elapsed_us / max(1, bound))
            cycles_ms.append(elapsed_us / 1000)
        rows.append(
            result(
                "scheduler.throughput",
                {"policy": name, "queued": queued, "gpus": nodes * 8, "cluster": "empty"},
                per_job,
                extra={
                    "bound_per_cycle": bound,
                    "cycle_ms_p50": round(sorted(cycles_ms)[reps // 2], 1),
                },
            )
        )
        for steady in (POLICIES[name], policy):  # default max_jobs (1,000), then all of them
            rows.append(_steady(name, steady, jobs, now, nodes, 3 if quick else 10))
    return rows


def _fields(policy: SchedulerPolicy) -> dict[str, Any]:
    return {f: getattr(policy, f) for f in policy.__dataclass_fields__}


def _steady(
    name: str, policy: SchedulerPolicy, jobs: list[PendingJob], now: float, nodes: int, n: int
) -> dict[str, Any]:
    """Fill the cluster, then time cycles in which 16 running jobs have just ended."""
    view = ClusterView(uniform_cluster(nodes))
    d = decide(now, jobs, (), view, {}, policy)
    by_id = {j.id: j for j in jobs}
    running = []
    for job_id, placement in d.binds.items():
        for t in placement.tasks:
            view.bind(t)
        j = by_id[job_id]
        running.append(RunningJob(job_id, j.tenant, placement.tasks, now, j.priority))
    waiting = [j for j in jobs if j.id not in d.binds]
    rng = random.Random(2)
    samples = []
    for _ in range(n):
        ended = rng.sample(running, 16)
        for r in ended:
            for t in r.tasks:
                view.release(t)
        rest = [r for r in running if r not in ended]
        t0 = time.perf_counter_ns()
        decide(now, waiting, rest, view, {}, policy)
        samples.append((time.perf_counter_ns() - t0) / 1000)
        for r in ended:
            for t in r.tasks:
                view.bind(t)
    return result(
        "scheduler.throughput",
        {
            "policy": name,
            "queued": len(waiting),
            "gpus": nodes * 8,
            "cluster": "full, 16 ended",
            "max_jobs": policy.max_jobs,
        },
        samples,
        extra={"unit": "us per cycle"},
    )


def bench_utilization(quick: bool) -> list[dict[str, Any]]:
    nodes, n_jobs, seeds = (8, 300, (7,)) if quick else (32, 3000, (7, 8, 9))
    load = 1.2
    rows = []
    for seed in seeds:
        jobs = generate(n_jobs, nodes * 8, random.Random(seed), WorkloadParams(load=load))
        for name, policy in POLICIES.items():
            samples: list[float] = []

            def timed(
                now: float,
                pending: Iterable[PendingJob],
                running: Iterable[RunningJob],
                view: ClusterView,
                quotas: Mapping[str, Quota],
                policy: SchedulerPolicy,
                samples: list[float] = samples,
            ) -> Decision:
                t0 = time.perf_counter_ns()
                d = decide(now, pending, running, view, quotas, policy)
                samples.append((time.perf_counter_ns() - t0) / 1000)
                return d

            r = simulate(uniform_cluster(nodes), jobs, policy, scheduler=timed)
            rows.append(
                result(
                    "scheduler.utilization",
                    {"policy": name, "gpus": nodes * 8, "jobs": n_jobs, "load": load, "seed": seed},
                    samples,
                    extra={
                        "alloc_pct": r.alloc_pct,
                        "arrivals_alloc_pct": r.arrivals_alloc_pct,
                        "queue_delay_p50_s": round(r.queue_delay_p50_s, 1),
                        "queue_delay_p99_s": round(r.queue_delay_p99_s, 1),
                        "jct_p50_s": round(r.jct_p50_s, 1),
                        "jct_p99_s": round(r.jct_p99_s, 1),
                        "preemptions": r.preemptions,
                        "cycles": r.cycles,
                    },
                )
            )
    return rows


def run(quick: bool = False) -> list[dict[str, Any]]:
    return bench_throughput(quick) + bench_utilization(quick)


if __name__ == "__main__":
    import sys

    for row in run(quick="--quick" in sys.argv):
        print(
            row["name"], row["params"], row["p50_us"], row["p99_us"], row["ops_per_s"], row["extra"]
        )
