"""The arrivals/departures simulation drives decide() on simulated time."""

from __future__ import annotations

import random

from gpu_platform.domain.scheduling import QueueOrder, SchedulerPolicy
from gpu_platform.domain.simulation.arrivals import percentile, simulate, uniform_cluster
from gpu_platform.domain.simulation.workload import SimJob, generate


def sim(
    id: str,
    at: float,
    gpus: int,
    duration: float,
    *,
    tasks: int = 1,
    priority: int = 0,
    limit: float | None = None,
) -> SimJob:
    return SimJob(id, "t", at, tasks, gpus, duration, priority, limit if limit else duration)


def test_every_job_runs_to_completion_and_the_run_is_deterministic() -> None:
    jobs = generate(150, 32, random.Random(5))
    policy = SchedulerPolicy(order=QueueOrder.PRIORITY, aging_rate=0.01, backfill=True)
    first = simulate(uniform_cluster(4), jobs, policy)
    assert first.finished == first.jobs == 150
    assert 0.0 <= first.alloc_pct <= 100.0
    assert first.queue_delay_p50_s <= first.queue_delay_p99_s
    assert first.jct_p50_s <= first.jct_p99_s
    assert simulate(uniform_cluster(4), jobs, policy) == first


def test_backfill_starts_small_jobs_behind_a_blocked_gang_without_delaying_it() -> None:
    jobs = [
        sim("long", 0.0, 8, 1000.0),  # holds one of two nodes until t=1000
        sim("gang", 1.0, 8, 100.0, tasks=2),  # needs both nodes
        sim("short", 2.0, 4, 50.0),  # fits on the idle node and ends long before t=1000
    ]
    strict = simulate(uniform_cluster(2), jobs, SchedulerPolicy())
    easy = simulate(uniform_cluster(2), jobs, SchedulerPolicy(backfill=True))
    assert strict.finished == easy.finished == 3
    assert easy.queue_delay_p50_s < strict.queue_delay_p50_s  # "short" no longer waits
    assert easy.jct_p99_s == strict.jct_p50_s == 1099.0  # the gang runs t=1000..1100 in both
    assert (easy.end_s, strict.end_s) == (1100.0, 1150.0)  # strict: "short" after the gang


def test_a_high_priority_arrival_preempts_and_starts_at_once() -> None:
    jobs = [sim(f"low{i}", 0.0, 8, 500.0) for i in range(2)]
    jobs.append(sim("urgent", 10.0, 8, 10.0, priority=5))
    policy = SchedulerPolicy(order=QueueOrder.PRIORITY, preemption=True)
    result = simulate(uniform_cluster(2), jobs, policy)
    assert result.preemptions == 1 and result.finished == 3
    assert result.queue_delay_p99_s == 0.0  # "urgent" started on arrival
    assert result.jct_p99_s == 520.0  # its victim restarted from scratch at t=20


def test_percentile_is_nearest_rank() -> None:
    assert percentile([], 50) == 0.0
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0
    assert percentile(list(map(float, range(101))), 99) == 99.0
