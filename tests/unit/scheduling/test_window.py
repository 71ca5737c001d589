"""The examination window: blocked jobs use none of it, tenants share it fairly, and a cycle
after a failover (running jobs on nodes not yet in the view) does not fail."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_platform.domain.placement import ClusterView, GpuRequest
from gpu_platform.domain.scheduling import PendingCode, PendingJob, Quota, SchedulerPolicy
from gpu_platform.domain.scheduling.window import fair_slices

from .helpers import cluster, job, run_cycle, start

BACKFILL = SchedulerPolicy(backfill=True)


def test_a_thousand_jobs_waiting_on_a_dependency_do_not_keep_another_tenants_job_waiting() -> None:
    blocked = [
        job(f"a{i}", 1, tenant="a", at=float(i), waiting_on=frozenset({"x"})) for i in range(1100)
    ]
    d = run_cycle(ClusterView(cluster(1)), [*blocked, job("b", 1, tenant="b", at=5000.0)])
    assert "b" in d.binds
    assert d.examined == 1
    assert d.pending_reasons["a1099"].code is PendingCode.DEPENDENCY


def test_jobs_over_quota_use_none_of_the_window() -> None:
    over = [job(f"a{i}", 1, tenant="a", at=float(i)) for i in range(50)]
    d = run_cycle(
        ClusterView(cluster(1)),
        [*over, job("b", 1, tenant="b", at=100.0)],
        quotas={"a": Quota(gpus=0)},
        policy=SchedulerPolicy(max_jobs=5),
    )
    assert "b" in d.binds  # b has no quota: it runs on idle capacity
    assert d.pending_reasons["a49"].code is PendingCode.QUOTA


def test_the_window_is_shared_across_tenants_when_one_tenant_floods_it() -> None:
    view = ClusterView(cluster(1))
    running = [start(view, job("r", 4, tenant="a"))]  # no time limit: reservations are at inf
    flood = [job(f"a{i}", 8, tenant="a", at=float(i)) for i in range(1100)]
    late = job("b", 1, tenant="b", at=5000.0, estimate=60.0)
    d = run_cycle(view, [*flood, late], running, now=6000.0, policy=BACKFILL)
    assert "b" in d.binds
    assert d.examined == 1000
    reason = d.pending_reasons["a1099"]
    assert reason.code is PendingCode.ADMISSION and "not examined" in reason.message


def test_a_tenant_slice_it_cannot_use_goes_to_the_others() -> None:
    assert fair_slices({"a": 2, "b": 100, "c": 100}, 10) == {"a": 2, "b": 4, "c": 4}
    assert fair_slices({"a": 5, "b": 5}, 20) == {"a": 5, "b": 5}
    assert fair_slices({"a": 3, "b": 3, "c": 3}, 2) == {"a": 1, "b": 1, "c": 1}


def test_the_window_is_filled_by_deferred_jobs_when_other_slices_go_unused() -> None:
    jobs = [job(f"a{i}", 0, tenant="a", at=float(i)) for i in range(10)]
    jobs += [job(f"q{i}", 1, tenant="q", at=float(i)) for i in range(10)]
    d = run_cycle(
        ClusterView(cluster(1)),
        jobs,
        quotas={"q": Quota(gpus=0)},
        policy=SchedulerPolicy(max_jobs=6),
    )
    assert d.examined == 6  # q's slice of 3 was blocked by quota; a used the whole window
    assert {f"a{i}" for i in range(6)} == set(d.binds)


def test_a_cycle_after_failover_ignores_running_jobs_on_nodes_not_yet_in_the_view() -> None:
    # a new leader's view holds only nodes whose agent reconnected; jobs still run elsewhere
    nodes = cluster(2)
    elsewhere = ClusterView(nodes[1:])
    far = start(elsewhere, job("far", 8, tenant="a"), end=150.0)
    stopping = start(elsewhere, job("stopping", 0, tenant="a"), terminating=True)
    view = ClusterView(nodes[:1])
    near = start(view, job("near", 6, tenant="a"), end=180.0)
    pending = [job("big", 4, tenant="b"), job("small", 1, tenant="b", at=1.0, estimate=10.0)]
    policy = SchedulerPolicy(backfill=True, preemption=True)
    d = run_cycle(view, pending, [far, stopping, near], policy=policy)
    assert "small" in d.binds
    assert d.pending_reasons["big"].code is PendingCode.CAPACITY
    assert d.reservation is not None and d.reservation.at == 180.0


def _blocked_job(kind: str, tenant: str, i: int) -> PendingJob:
    at = float(i)
    if kind == "dependency":
        return job(f"{tenant}-{i}", 1, tenant=tenant, at=at, waiting_on=frozenset({"x"}))
    if kind == "quota":
        return job(f"{tenant}-{i}", 1, tenant="capped", at=at, seq=i * 10 + len(tenant))
    if kind == "too-big":  # larger than what is free, not than the cluster
        return job(f"{tenant}-{i}", 12, tenant=tenant, at=at)
    if kind == "cpu-only":  # runnable: it is bound, using window but no GPU
        return job(f"{tenant}-{i}", 0, tenant=tenant, at=at)
    return PendingJob(f"{tenant}-{i}", tenant, GpuRequest(gpus=64), at, i * 10 + len(tenant))


@settings(max_examples=40, deadline=None)
@given(
    queues=st.lists(
        st.lists(
            st.sampled_from(["dependency", "quota", "too-big", "never-fits", "cpu-only"]),
            max_size=40,
        ),
        min_size=1,
        max_size=4,
    ),
    max_jobs=st.integers(min_value=6, max_value=30),
    gpus=st.integers(min_value=1, max_value=2),  # 2 free on each node
    submitted=st.floats(min_value=0.0, max_value=50.0),
)
def test_a_runnable_job_that_fits_free_gpus_is_bound_whatever_other_tenants_queue(
    queues: list[list[str]], max_jobs: int, gpus: int, submitted: float
) -> None:
    view = ClusterView(cluster(2))
    running = [start(view, job("r0", 6, tenant="o0")), start(view, job("r1", 6, tenant="o1"))]
    others = [
        _blocked_job(kind, f"t{t}", i) for t, q in enumerate(queues) for i, kind in enumerate(q)
    ]
    mine = job("mine", gpus, tenant="me", at=submitted, seq=10_000, estimate=30.0)
    d = run_cycle(
        view,
        [*others, mine],
        running,
        quotas={"capped": Quota(gpus=0)},
        policy=SchedulerPolicy(backfill=True, max_jobs=max_jobs),
    )
    assert "mine" in d.binds, d.pending_reasons.get("mine")
    assert d.examined <= max_jobs
