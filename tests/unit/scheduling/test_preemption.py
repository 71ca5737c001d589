"""Preemption: the cheapest victim set, whole gangs, only lower priority, never the protected;
checked against a brute-force oracle on small clusters."""

from __future__ import annotations

from itertools import combinations

from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_platform.domain.placement import ClusterView, GangPlacement, place
from gpu_platform.domain.scheduling import (
    PendingCode,
    PreemptionCause,
    RunningJob,
    SchedulerPolicy,
)

from .helpers import cluster, job, run_cycle, start

PREEMPT = SchedulerPolicy(preemption=True)


def victims(d: object) -> set[str]:
    return {p.victim for p in d.preemptions}  # type: ignore[attr-defined]


def test_the_victim_set_frees_the_fewest_gpus() -> None:
    view = ClusterView(cluster(2, gpus=4))
    running = [start(view, job("n0-big", 4))]  # n0
    running += [start(view, job(f"n1-{i}", 1)) for i in range(4)]  # n1
    d = run_cycle(view, [job("p", 2, priority=5)], running, policy=PREEMPT)
    assert victims(d) == {"n1-0", "n1-1"}  # 2 GPUs rather than 4
    assert all(p.cause is PreemptionCause.PRIORITY and p.preemptor == "p" for p in d.preemptions)
    assert d.pending_reasons["p"].code is PendingCode.PREEMPTION
    assert d.pending_reasons["p"].message.startswith("preempting n1-0 (priority), n1-1 (priority)")


def test_at_equal_gpus_the_lowest_priority_then_least_progress_is_chosen() -> None:
    view = ClusterView(cluster(1, gpus=4))
    running = [
        start(view, job("prio3", 1, priority=3)),
        start(view, job("prio1-far", 1, priority=1), progress=0.9),
        start(view, job("prio1-near", 1, priority=1), progress=0.1),
        start(view, job("prio2", 1, priority=2)),
    ]
    d = run_cycle(view, [job("p", 1, priority=5)], running, policy=PREEMPT)
    assert victims(d) == {"prio1-near"}


def test_equal_or_higher_priority_and_non_preemptible_jobs_are_never_victims() -> None:
    view = ClusterView(cluster(1, gpus=4))
    running = [
        start(view, job("same", 2, priority=5)),
        start(view, job("pinned", 2, priority=0), preemptible=False),
    ]
    d = run_cycle(view, [job("p", 2, priority=5)], running, policy=PREEMPT)
    assert d.preemptions == ()
    assert d.pending_reasons["p"].code is PendingCode.CAPACITY


def test_a_gang_victim_is_preempted_whole() -> None:
    view = ClusterView(cluster(2, gpus=4))
    gang = start(view, job("gang", 4, tasks=2, priority=0))  # all 8 GPUs on both nodes
    d = run_cycle(view, [job("p", 2, priority=5)], [gang], policy=PREEMPT)
    assert [p.victim for p in d.preemptions] == ["gang"]


def test_a_gang_preemptor_gets_a_minimal_victim_set() -> None:
    view = ClusterView(cluster(3, gpus=4))
    running = [start(view, job(f"r{i}", 2, priority=i % 2)) for i in range(6)]
    d = run_cycle(view, [job("p", 4, tasks=2, priority=5)], running, policy=PREEMPT)
    chosen = victims(d)
    assert len(chosen) == 4  # two whole nodes of 2-GPU jobs
    by_id = {r.id: r for r in running}
    for v in chosen:  # minimal: without any one victim the gang no longer fits
        assert not fits_after(view, [by_id[x] for x in chosen - {v}], job("p", 4, tasks=2))


def test_a_preemptor_waits_for_stopping_jobs_instead_of_choosing_more_victims() -> None:
    view = ClusterView(cluster(1, gpus=4))
    running = [
        start(view, job("stopping", 2, priority=0), terminating=True),
        start(view, job("other", 2, priority=0)),
    ]
    d = run_cycle(view, [job("p", 2, priority=5)], running, policy=PREEMPT)
    assert d.preemptions == ()
    assert d.pending_reasons["p"].code is PendingCode.PREEMPTION
    assert d.pending_reasons["p"].message.startswith("waiting for preempted jobs to stop")


def test_preemption_off_chooses_no_victims() -> None:
    view = ClusterView(cluster(1, gpus=4))
    running = [start(view, job("low", 4, priority=0))]
    d = run_cycle(view, [job("p", 4, priority=5)], running)
    assert d.preemptions == () and d.pending_reasons["p"].code is PendingCode.CAPACITY


def fits_after(view: ClusterView, gone: list[RunningJob], pending: object) -> bool:
    for r in gone:
        for t in r.tasks:
            view.release(t, r.cpu_milli, r.memory_bytes)
    try:
        return isinstance(place(pending.request, view), GangPlacement)  # type: ignore[attr-defined]
    finally:
        for r in gone:
            for t in r.tasks:
                view.bind(t, r.cpu_milli, r.memory_bytes)


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.sampled_from([1, 1, 2, 3, 4]), min_size=1, max_size=7),
    priorities=st.lists(st.integers(0, 3), min_size=7, max_size=7),
    progress=st.lists(st.sampled_from([0.0, 0.5, 1.0]), min_size=7, max_size=7),
    want=st.integers(1, 4),
)
def test_single_task_victim_sets_are_as_cheap_as_the_brute_force_oracle(
    sizes: list[int], priorities: list[int], progress: list[float], want: int
) -> None:
    view = ClusterView(cluster(2, gpus=4))
    running: list[RunningJob] = []
    for i, size in enumerate(sizes):
        pj = job(f"r{i}", size, priority=priorities[i])
        if isinstance(place(pj.request, view), GangPlacement):
            running.append(start(view, pj, progress=progress[i]))
    preemptor = job("p", want, priority=2)
    d = run_cycle(view, [preemptor], running, policy=PREEMPT)
    eligible = [r for r in running if r.priority < 2]
    best = None
    for n in range(len(eligible) + 1):
        for subset in combinations(eligible, n):
            if fits_after(view, list(subset), preemptor):
                key = (
                    sum(r.gpu_milli for r in subset),
                    max((r.priority for r in subset), default=0),
                )
                best = key if best is None or key < best else best
    if "p" in d.binds:
        assert best == (0, 0)
        return
    chosen = [r for r in running if r.id in victims(d)]
    if best is None or best == (0, 0):
        assert not chosen
        return
    assert chosen, d.pending_reasons["p"]
    assert fits_after(view, chosen, preemptor)
    got = (sum(r.gpu_milli for r in chosen), max(r.priority for r in chosen))
    assert got == best


def test_a_job_younger_than_the_exempt_time_is_never_a_victim() -> None:
    policy = SchedulerPolicy(preemption=True, min_runtime_s=300.0)
    view = ClusterView(cluster(1, gpus=4))
    running = [start(view, job("young", 4), now=50.0)]
    early = run_cycle(view, [job("p", 4, priority=5)], running, now=200.0, policy=policy)
    assert early.preemptions == ()
    assert early.pending_reasons["p"].code is PendingCode.CAPACITY
    later = run_cycle(view, [job("p", 4, priority=5)], running, now=350.0, policy=policy)
    assert victims(later) == {"young"}
