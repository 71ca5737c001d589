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


def test_a_tenant_without_a_quota_runs_on_idle_capacity_as_a_borrower() -> None:
    """No guarantee and no cap (docs/scheduling.md): `default` is not starved by others' quotas."""
    d = run_cycle(
        ClusterView(cluster(1)),
        [job("x", 6, tenant="default"), job("a0", 2, tenant="a")],
        quotas={"a": Quota(2)},
    )
    assert set(d.binds) == {"x", "a0"}
    assert d.borrowing == {"x"}
    assert d.pending_reasons == {}


def test_a_tenant_with_a_quota_reclaims_what_a_quota_less_tenant_took() -> None:
    view = ClusterView(cluster(1))
    running = [start(view, job("x", 8, tenant="default", priority=9))]  # admitted before quotas
    policy = SchedulerPolicy(preemption=True, backfill=True)
    d = run_cycle(view, [job("a0", 4, tenant="a")], running, quotas={"a": Quota(4)}, policy=policy)
    assert [(p.victim, p.preemptor, p.cause) for p in d.preemptions] == [
        ("x", "a0", PreemptionCause.RECLAIM)
    ]


def test_a_quota_less_tenant_never_reclaims_and_never_takes_guaranteed_work() -> None:
    view = ClusterView(cluster(1))
    running = [start(view, job("a0", 8, tenant="a", priority=0))]
    policy = SchedulerPolicy(preemption=True)
    d = run_cycle(
        view, [job("x", 1, tenant="default", priority=9)], running, quotas={"a": Quota(8)},
        policy=policy,
    )  # fmt: skip
    assert d.preemptions == ()
    assert d.pending_reasons["x"].code is PendingCode.CAPACITY


def test_a_quota_less_tenant_has_no_cap() -> None:
    view = ClusterView(cluster(2))
    running = [start(view, job("x0", 8, tenant="default"))]
    d = run_cycle(view, [job("x1", 8, tenant="default")], running, quotas={"a": Quota(1)})
    assert set(d.binds) == {"x1"}


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
