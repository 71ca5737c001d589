"""Node failure injection in the arrivals simulation: a failed node takes all its GPUs out at
once, every job with a task on it is queued again whole, the node comes back after its repair
time, no job is lost; together with GPU failures a GPU is out while either is down."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_platform.domain.scheduling import SchedulerPolicy
from gpu_platform.domain.simulation.arrivals import (
    Failures,
    Outcome,
    simulate_detailed,
    uniform_cluster,
)
from gpu_platform.domain.simulation.workload import SimJob, generate

from .test_arrivals_failures import PREEMPT, check_run


def test_a_gang_on_a_failed_node_is_queued_again_whole_and_restarts() -> None:
    gang = SimJob("gang", "t", 0.0, 2, 8, 20_000.0, 0, None)
    failures = Failures(0.0, seed=5, node_rate_per_hour=0.2, node_repair_s=900.0)
    detail = simulate_detailed(uniform_cluster(2), [gang], SchedulerPolicy(), failures=failures)
    check_run(detail, [gang])
    hit = [a for a in detail.attempts if a.outcome == Outcome.NODE_FAILED]
    assert hit, "the rate makes at least one node failure under a 20,000 s gang likely"
    assert all(a.gpus == 16 for a in detail.attempts)  # both tasks stop and restart together
    assert detail.node_failures >= detail.jobs_requeued_by_node_failure == len(hit)
    assert detail.failures == 0  # no GPU failures were asked for
    assert detail.lost_gpu_hours == pytest.approx(
        sum(16 * (a.end_s - a.start_s) for a in hit) / 3600, abs=0.01
    )


def test_a_down_node_holds_all_its_gpus_out_until_it_is_repaired() -> None:
    jobs = [j for j in generate(40, 8, random.Random(2)) if j.gpus <= 8]  # all fit one node
    failures = Failures(0.0, seed=1, node_rate_per_hour=0.05, node_repair_s=1200.0)
    detail = simulate_detailed(uniform_cluster(1), jobs, SchedulerPolicy(), failures=failures)
    check_run(detail, jobs)
    down = [s for s in detail.samples if s.down_nodes]
    assert down and detail.node_failures > 0
    assert all(s.down_gpus == 8 and s.allocated_gpus == 0 and s.running == 0 for s in down)
    assert detail.down_gpu_hours == pytest.approx(8 * 1200 * detail.node_failures / 3600, abs=0.01)


def test_node_failures_are_deterministic_per_seed_and_differ_across_seeds() -> None:
    jobs = generate(80, 32, random.Random(4))

    def run(seed: int) -> tuple[object, ...]:
        f = Failures(0.003, 1800.0, seed, node_rate_per_hour=0.01, node_repair_s=600.0)
        d = simulate_detailed(uniform_cluster(4), jobs, PREEMPT, failures=f)
        return d.attempts, d.samples, d.node_failures, d.failures

    assert run(1) == run(1)
    assert run(1) != run(2)


@settings(max_examples=15, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    gpu_rate=st.sampled_from([0.0, 0.002, 0.02]),
    node_rate=st.sampled_from([0.005, 0.05]),
    repair=st.sampled_from([300.0, 3000.0]),
    policy=st.sampled_from([SchedulerPolicy(), PREEMPT]),
)
def test_with_node_and_gpu_failures_no_job_is_lost_and_no_gpu_is_counted_twice(
    seed: int, gpu_rate: float, node_rate: float, repair: float, policy: SchedulerPolicy
) -> None:
    jobs = generate(30, 32, random.Random(seed))  # 4x8 gangs: four nodes
    failures = Failures(
        gpu_rate, repair, seed, max_restarts=3, node_rate_per_hour=node_rate, node_repair_s=repair
    )
    detail = simulate_detailed(uniform_cluster(4), jobs, policy, failures=failures)
    check_run(detail, jobs)
    for s in detail.samples:
        assert 8 * s.down_nodes <= s.down_gpus <= 32
        assert s.running == 0 or s.allocated_gpus > 0
    requeued = sum(a.outcome == Outcome.NODE_FAILED for a in detail.attempts)
    assert detail.jobs_requeued_by_node_failure == requeued
    assert detail.node_failures >= 0 and detail.abandoned <= len(jobs)


def test_node_failure_parameters_are_checked() -> None:
    assert Failures(0.0, node_rate_per_hour=0.1).node_rate_per_hour == 0.1
    with pytest.raises(ValueError, match="node_rate_per_hour must be >= 0"):
        Failures(0.1, node_rate_per_hour=-1.0)
    with pytest.raises(ValueError, match="node_repair_s"):
        Failures(0.0, node_rate_per_hour=0.1, node_repair_s=0.0)
    with pytest.raises(ValueError, match="rate_per_gpu_hour or node_rate_per_hour"):
        Failures(0.0)
