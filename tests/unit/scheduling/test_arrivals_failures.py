"""GPU failure injection in the arrivals simulation: seeded, jobs on a failed GPU queued again
whole, no job lost, every job ends; without failures the results are the plain `simulate`'s."""

from __future__ import annotations

import random
from collections import defaultdict
from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_platform.domain.scheduling import QueueOrder, SchedulerPolicy
from gpu_platform.domain.simulation.arrivals import (
    ArrivalsDetail,
    Failures,
    Outcome,
    simulate,
    simulate_detailed,
    uniform_cluster,
)
from gpu_platform.domain.simulation.workload import SimJob, generate

PREEMPT = SchedulerPolicy(
    order=QueueOrder.PRIORITY, aging_rate=1 / 600, fair_share=True, backfill=True, preemption=True
)


def check_run(detail: ArrivalsDetail, jobs: list[SimJob]) -> None:
    """Every job ended exactly once (finished, or abandoned after too many failures), after
    its failed/preempted attempts; attempts of a job never overlap; GPUs allocated + down
    never exceed the cluster."""
    by_job = defaultdict(list)
    for a in detail.attempts:
        by_job[a.job_id].append(a)
    assert detail.result.finished + detail.abandoned == len(jobs)
    ends = (Outcome.FINISHED, Outcome.ABANDONED)
    for j in jobs:
        mine = by_job[j.id]
        assert sum(a.outcome in ends for a in mine) == 1
        assert mine[-1].outcome in ends
        if mine[-1].outcome == Outcome.FINISHED:
            assert mine[-1].end_s - mine[-1].start_s == pytest.approx(j.duration_s)
        assert all(a.gpus == j.gpus for a in mine)
        for a, b in pairwise(mine):
            assert a.end_s <= b.start_s
            assert a.start_s >= j.submit_s
    for s in detail.samples:
        assert 0 <= s.allocated_gpus + s.down_gpus <= detail.gpus


def test_without_failures_the_detailed_run_matches_simulate() -> None:
    jobs = generate(120, 32, random.Random(3))
    detail = simulate_detailed(uniform_cluster(4), jobs, PREEMPT)
    assert detail.result == simulate(uniform_cluster(4), jobs, PREEMPT)
    assert detail.failures == 0 and detail.lost_gpu_hours == detail.down_gpu_hours == 0.0
    check_run(detail, jobs)


def test_failures_are_deterministic_per_seed_and_differ_across_seeds() -> None:
    jobs = generate(150, 32, random.Random(5))

    def run(seed: int) -> ArrivalsDetail:
        return simulate_detailed(
            uniform_cluster(4), jobs, PREEMPT, failures=Failures(0.005, 1800.0, seed)
        )

    assert run(1) == run(1)
    assert run(1).failures > 0
    assert run(1).attempts != run(2).attempts


def test_a_job_on_a_failed_gpu_is_queued_again_whole_and_restarts() -> None:
    # one 8-GPU job of 10 hours on one 8-GPU node; failures are frequent enough to hit it
    job = SimJob("big", "t", 0.0, 1, 8, 36_000.0, 0, None)
    detail = simulate_detailed(
        uniform_cluster(1), [job], SchedulerPolicy(), failures=Failures(0.02, 600.0, 7)
    )
    outcomes = [a.outcome for a in detail.attempts]
    assert Outcome.FAILED in outcomes and outcomes[-1] == Outcome.FINISHED
    failed = [a for a in detail.attempts if a.outcome == Outcome.FAILED]
    assert detail.lost_gpu_hours == pytest.approx(
        sum(8 * (a.end_s - a.start_s) for a in failed) / 3600, abs=0.01
    )
    # the restart waits for the repair: the node has no other 8 free GPUs
    for a, b in pairwise(detail.attempts):
        assert b.start_s >= a.end_s
    assert detail.result.jct_p50_s > 36_000.0
    check_run(detail, [job])


def test_a_job_larger_than_the_cluster_does_not_keep_the_run_alive() -> None:
    jobs = [
        SimJob("ok", "t", 0.0, 1, 1, 100.0, 0, None),
        SimJob("huge", "t", 0.0, 2, 8, 1, 0, None),
    ]
    detail = simulate_detailed(
        uniform_cluster(1), jobs, SchedulerPolicy(backfill=True), failures=Failures(0.01, 60.0, 1)
    )
    assert detail.result.finished == 1  # "huge" never fits; the run still ends


@settings(max_examples=15, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    rate=st.sampled_from([0.001, 0.01, 0.05]),
    preempt=st.booleans(),
)
def test_with_failures_no_job_is_lost_and_every_job_ends(
    seed: int, rate: float, preempt: bool
) -> None:
    jobs = generate(40, 32, random.Random(seed))
    policy = PREEMPT if preempt else SchedulerPolicy()
    detail = simulate_detailed(
        uniform_cluster(4), jobs, policy, failures=Failures(rate, 1200.0, seed)
    )
    check_run(detail, jobs)
    assert detail.lost_gpu_hours >= 0 and detail.down_gpu_hours >= 0


def test_a_job_that_keeps_failing_is_abandoned_after_max_restarts() -> None:
    # 4 x 8 GPUs for 2 days at 0.05 failures per GPU-hour: about 77 failures per run
    job = SimJob("gang", "t", 0.0, 4, 8, 172_800.0, 0, None)
    failures = Failures(0.05, 600.0, 3, max_restarts=2)
    detail = simulate_detailed(uniform_cluster(4), [job], SchedulerPolicy(), failures=failures)
    assert [a.outcome for a in detail.attempts] == [Outcome.FAILED] * 2 + [Outcome.ABANDONED]
    assert detail.abandoned == 1 and detail.result.finished == 0
    check_run(detail, [job])


def test_failure_parameters_are_checked() -> None:
    with pytest.raises(ValueError, match="rate_per_gpu_hour"):
        Failures(0.0)
    with pytest.raises(ValueError, match="repair_s"):
        Failures(0.1, 0.0)
