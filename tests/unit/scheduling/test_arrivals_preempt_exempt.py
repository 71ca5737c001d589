"""Preemption exempt time in the arrivals simulation (`SchedulerPolicy.min_runtime_s`, what
production sets from `scheduler_preempt_exempt_seconds`): no job is a victim before it has run
that long, which ends the thrashing of preempt on a small cluster."""

from __future__ import annotations

import dataclasses
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_platform.domain.simulation.arrivals import (
    ArrivalsDetail,
    Outcome,
    simulate_detailed,
    uniform_cluster,
)
from gpu_platform.domain.simulation.workload import SimJob, generate

from .test_arrivals_failures import PREEMPT, check_run


def early_preemptions(detail: ArrivalsDetail, exempt_s: float) -> int:
    """Preemptions of a job started less than `exempt_s` before (decide's own test)."""
    return sum(
        a.outcome == Outcome.PREEMPTED and not a.start_s <= a.end_s - exempt_s
        for a in detail.attempts
    )


def test_an_exempt_job_is_preempted_only_once_it_has_run_the_exempt_time() -> None:
    low = SimJob("low", "a", 0.0, 1, 8, 1000.0, 0, None)
    high = SimJob("high", "b", 10.0, 1, 8, 100.0, 2, None)
    tick = SimJob("tick", "c", 400.0, 1, 1, 1.0, 0, None)  # an event after the exempt time
    jobs = [low, high, tick]
    eager = simulate_detailed(uniform_cluster(1), jobs, PREEMPT)
    first = eager.attempts[0]
    assert (first.job_id, first.start_s, first.end_s) == ("low", 0.0, 10.0)
    exempt = simulate_detailed(
        uniform_cluster(1), jobs, dataclasses.replace(PREEMPT, min_runtime_s=300.0)
    )
    preempted = [a for a in exempt.attempts if a.outcome == Outcome.PREEMPTED]
    assert [(a.job_id, a.start_s, a.end_s) for a in preempted] == [("low", 0.0, 400.0)]
    check_run(exempt, jobs)


@settings(max_examples=20, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    nodes=st.integers(1, 3),
    exempt=st.sampled_from([60.0, 300.0, 1800.0]),
)
def test_no_job_is_ever_preempted_before_it_has_run_the_exempt_time(
    seed: int, nodes: int, exempt: float
) -> None:
    jobs = [j for j in generate(40, 8 * nodes, random.Random(seed)) if j.gpus <= 8 * nodes]
    policy = dataclasses.replace(PREEMPT, min_runtime_s=exempt)
    detail = simulate_detailed(uniform_cluster(nodes), jobs, policy)
    assert early_preemptions(detail, exempt) == 0
    check_run(detail, jobs)


def test_a_victim_past_the_aging_bound_is_not_preempted_for_a_younger_job() -> None:
    # Re-queued with its submission time, `old` would sort first (tier 0) and take its GPUs
    # back at once; choosing it as a victim again at every event was a livelock.
    policy = dataclasses.replace(PREEMPT, aging_bound_s=7200.0, min_runtime_s=300.0)
    old = SimJob("old", "a", 0.0, 1, 8, 20_000.0, 0, None)
    fresh = SimJob("fresh", "a", 2000.0, 1, 8, 20_000.0, 0, None)
    young = SimJob("young", "b", 8000.0, 1, 8, 100.0, 2, None)
    ticks = [SimJob(f"tick{i}", "d", 8000.0 + 100 * i, 1, 1, 1.0, 0, None) for i in range(5)]
    jobs = [old, young, *ticks]
    detail = simulate_detailed(uniform_cluster(1), jobs, policy)
    assert not [a for a in detail.attempts if a.outcome == Outcome.PREEMPTED]
    check_run(detail, jobs)
    # a victim submitted less than the bound ago is still preempted
    jobs = [fresh, young, *ticks]
    detail = simulate_detailed(uniform_cluster(1), jobs, policy)
    preempted = [a for a in detail.attempts if a.outcome == Outcome.PREEMPTED]
    assert [(a.job_id, a.end_s) for a in preempted] == [("fresh", 8000.0)]
    check_run(detail, jobs)
