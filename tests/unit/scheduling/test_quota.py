"""Kueue-style quotas: nominal, borrowing from the cohort, limits, reclaim."""

from __future__ import annotations

from gpu_platform.domain.placement import ClusterView
from gpu_platform.domain.scheduling import (
    PendingCode,
    PreemptionCause,
    Quota,
    SchedulerPolicy,
)

from .helpers import cluster, job, run_cycle, start

BACKFILL = SchedulerPolicy(backfill=True)


def test_a_tenant_without_a_cohort_waits_at_its_nominal_quota() -> None:
    view = ClusterView(cluster(2))
    running = [start(view, job("a0", 8, tenant="a"))]
    d = run_cycle(view, [job("a1", 1, tenant="a")], running, quotas={"a": Quota(8)})
    assert d.pending_reasons["a1"].code is PendingCode.QUOTA
    assert d.pending_reasons["a1"].message == (
        "tenant a at quota: 8/8 GPUs guaranteed, job needs 1; no cohort to borrow from"
    )


def test_a_tenant_borrows_idle_quota_of_its_cohort_and_is_marked_borrowing() -> None:
    quotas = {"a": Quota(4, cohort="c"), "b": Quota(4, cohort="c")}
    d = run_cycle(ClusterView(cluster(1)), [job("a0", 8, tenant="a")], quotas=quotas)
    assert set(d.binds) == {"a0"} and d.borrowing == {"a0"}


def test_the_borrowing_limit_is_named_when_reached() -> None:
    view = ClusterView(cluster(2))
    quotas = {"a": Quota(8, borrowing_limit=4, cohort="c"), "b": Quota(8, cohort="c")}
    running = [start(view, job("a0", 8, tenant="a")), start(view, job("a1", 4, tenant="a"))]
    d = run_cycle(view, [job("a2", 1, tenant="a")], running, quotas=quotas)
    assert d.pending_reasons["a2"].message == (
        "tenant a at quota: 12/8 GPUs guaranteed, job needs 1; borrowing limit 4 reached"
        " (would borrow 5)"
    )


def test_the_lending_limit_caps_what_the_cohort_can_borrow() -> None:
    quotas = {"a": Quota(2, cohort="c"), "b": Quota(6, lending_limit=2, cohort="c")}
    d = run_cycle(
        ClusterView(cluster(1)),
        [job("a0", 4, tenant="a", at=0.0), job("a1", 1, tenant="a", at=1.0)],
        quotas=quotas,
        policy=BACKFILL,
    )
    assert set(d.binds) == {"a0"}
    assert d.pending_reasons["a1"].code is PendingCode.QUOTA
    assert "cohort c lends 2 idle GPUs, 2 already borrowed" in d.pending_reasons["a1"].message


def test_an_unknown_tenant_is_not_admitted_when_quotas_are_set() -> None:
    d = run_cycle(ClusterView(cluster(1)), [job("x", 1, tenant="z")], quotas={"a": Quota(8)})
    assert d.pending_reasons["x"].code is PendingCode.ADMISSION
    assert d.pending_reasons["x"].message == "tenant z has no quota"


def test_cpu_quota_is_a_hard_cap() -> None:
    from gpu_platform.domain.placement import GpuRequest
    from gpu_platform.domain.scheduling import PendingJob

    heavy = PendingJob("h", "a", GpuRequest(gpus=1, cpu_milli=3000), 0.0, 0)
    d = run_cycle(ClusterView(cluster(1)), [heavy], quotas={"a": Quota(8, cpu_milli=2000)})
    assert (
        d.pending_reasons["h"].code is PendingCode.QUOTA and "CPU" in d.pending_reasons["h"].message
    )


def test_the_owner_reclaims_borrowed_gpus_by_preempting_the_borrower() -> None:
    view = ClusterView(cluster(1))
    quotas = {"a": Quota(4, cohort="c"), "b": Quota(4, cohort="c")}
    running = [
        start(view, job("a0", 4, tenant="a", priority=5)),
        start(view, job("a-borrowed", 4, tenant="a", priority=5), borrowing=True),
    ]
    policy = SchedulerPolicy(preemption=True, backfill=True)
    d = run_cycle(
        view, [job("b0", 4, tenant="b", priority=0)], running, quotas=quotas, policy=policy
    )
    assert [(p.victim, p.preemptor, p.cause) for p in d.preemptions] == [
        ("a-borrowed", "b0", PreemptionCause.RECLAIM)
    ]
    assert d.pending_reasons["b0"].code is PendingCode.PREEMPTION
    assert d.reservation is not None and d.reservation.job == "b0"


def test_guaranteed_work_of_another_tenant_is_never_preempted_for_priority() -> None:
    view = ClusterView(cluster(1))
    quotas = {"a": Quota(8, cohort="c"), "b": Quota(8, cohort="c")}
    running = [start(view, job("a0", 8, tenant="a", priority=0))]
    policy = SchedulerPolicy(preemption=True)
    d = run_cycle(
        view, [job("b0", 8, tenant="b", priority=9)], running, quotas=quotas, policy=policy
    )
    assert d.preemptions == ()
    assert d.pending_reasons["b0"].code is PendingCode.CAPACITY


def test_a_tenant_over_its_guarantee_cannot_reclaim() -> None:
    view = ClusterView(cluster(1))
    quotas = {"a": Quota(4, cohort="c"), "b": Quota(2, cohort="c")}
    running = [
        start(view, job("a0", 4, tenant="a")),
        start(view, job("a1", 2, tenant="a"), borrowing=True),
        start(view, job("b0", 2, tenant="b")),
    ]
    policy = SchedulerPolicy(preemption=True)
    d = run_cycle(view, [job("b1", 2, tenant="b")], running, quotas=quotas, policy=policy)
    assert d.preemptions == ()
    assert d.pending_reasons["b1"].code is PendingCode.QUOTA
