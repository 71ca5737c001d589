"""Queue order: FIFO, strict head-of-line, priority with aging, the starvation bound, DRF."""

from __future__ import annotations

import pytest

from gpu_platform.domain.placement import ClusterView
from gpu_platform.domain.scheduling import (
    PendingCode,
    QueueOrder,
    SchedulerPolicy,
    effective_priority,
)

from .helpers import cluster, job, run_cycle, start

PRIORITY = SchedulerPolicy(order=QueueOrder.PRIORITY, backfill=True)


def test_fifo_binds_in_submission_order_until_the_cluster_is_full() -> None:
    view = ClusterView(cluster(1))
    jobs = [job(f"j{i}", 2, at=float(i)) for i in range(5)]
    d = run_cycle(view, list(reversed(jobs)))
    assert set(d.binds) == {"j0", "j1", "j2", "j3"}
    assert d.pending_reasons["j4"].code is PendingCode.CAPACITY
    assert d.pending_reasons["j4"].message == "needs 2 GPUs, 0 free"


def test_strict_fifo_holds_small_jobs_behind_a_head_that_does_not_fit() -> None:
    view = ClusterView(cluster(1))
    start(view, job("big-running", 4))
    d = run_cycle(view, [job("head", 8, at=1.0), job("small", 1, at=2.0)])
    assert d.binds == {}
    assert d.pending_reasons["head"].code is PendingCode.CAPACITY
    assert d.pending_reasons["small"].code is PendingCode.RESERVATION
    assert "behind head" in d.pending_reasons["small"].message


def test_priority_order_binds_the_higher_priority_job_first() -> None:
    view = ClusterView(cluster(1))
    d = run_cycle(
        view,
        [job("low", 8, priority=1, at=0.0), job("high", 8, priority=5, at=1.0)],
        policy=PRIORITY,
    )
    assert set(d.binds) == {"high"}


def test_aging_lets_a_long_waiting_job_overtake_a_higher_priority_one() -> None:
    policy = SchedulerPolicy(order=QueueOrder.PRIORITY, aging_rate=0.1)
    old, new = job("old", 8, priority=0, at=0.0), job("new", 8, priority=5, at=99.0)
    assert effective_priority(old, 100.0, policy) == 10  # 0 + floor(0.1 x 100)
    assert effective_priority(new, 100.0, policy) == 5
    d = run_cycle(ClusterView(cluster(1)), [new, old], now=100.0, policy=policy)
    assert set(d.binds) == {"old"}


def test_a_job_past_the_aging_bound_goes_before_every_other_job() -> None:
    policy = SchedulerPolicy(order=QueueOrder.PRIORITY, aging_bound_s=50.0, fair_share=True)
    starving = job("starving", 8, priority=-100, tenant="b", at=10.0)
    urgent = job("urgent", 8, priority=100, tenant="a", at=90.0)
    d = run_cycle(ClusterView(cluster(1)), [urgent, starving], now=100.0, policy=policy)
    assert set(d.binds) == {"starving"}


def test_fifo_ignores_priority() -> None:
    d = run_cycle(
        ClusterView(cluster(1)),
        [job("first", 8, priority=0, at=0.0), job("second", 8, priority=9, at=1.0)],
        policy=SchedulerPolicy(backfill=True),
    )
    assert set(d.binds) == {"first"}


def test_fair_share_serves_the_tenant_with_the_smaller_dominant_share_first() -> None:
    view = ClusterView(cluster(2))
    running = [start(view, job(f"a-run{i}", 2, tenant="a")) for i in range(4)]  # a holds 8
    pending = [job("a-next", 4, tenant="a", at=1.0), job("b-next", 4, tenant="b", at=2.0)]
    pending += [job("b-more", 8, tenant="b", at=3.0)]
    fair = SchedulerPolicy(fair_share=True, backfill=True)
    d = run_cycle(view, pending, running, policy=fair)
    assert "b-next" in d.binds and "a-next" in d.binds  # 8 free GPUs: b first, then a (4 each)
    unfair = run_cycle(view, pending, running, policy=SchedulerPolicy(backfill=True))
    assert set(unfair.binds) == {"a-next", "b-next"}  # same outcome here, by FIFO


def test_fair_share_weights_scale_the_dominant_share() -> None:
    view = ClusterView(cluster(1))
    running = [start(view, job("a-run", 2, tenant="a")), start(view, job("b-run", 1, tenant="b"))]
    pending = [job("a-next", 5, tenant="a", at=1.0), job("b-next", 5, tenant="b", at=0.0)]
    plain = run_cycle(view, pending, running, policy=SchedulerPolicy(fair_share=True))
    assert set(plain.binds) == {"b-next"}  # b's share 1/8 < a's 2/8
    weighted = SchedulerPolicy(fair_share=True, weights={"a": 4.0})
    d = run_cycle(view, pending, running, policy=weighted)
    assert set(d.binds) == {"a-next"}  # a's share 2/8 / 4 < b's 1/8


def test_dependencies_keep_a_job_waiting_with_their_names() -> None:
    d = run_cycle(ClusterView(cluster(1)), [job("j", 1, waiting_on=frozenset({"x", "w"}))])
    assert d.pending_reasons["j"].code is PendingCode.DEPENDENCY
    assert d.pending_reasons["j"].message == "waiting for w, x"


def test_work_per_cycle_is_bounded_and_the_rest_say_so() -> None:
    jobs = [job(f"j{i}", 0, at=float(i)) for i in range(10)]
    d = run_cycle(ClusterView(cluster(1)), jobs, policy=SchedulerPolicy(max_jobs=3))
    assert d.examined == 3 and set(d.binds) == {"j0", "j1", "j2"}
    assert all(d.pending_reasons[f"j{i}"].code is PendingCode.ADMISSION for i in range(3, 10))
    assert "not examined this cycle" in d.pending_reasons["j9"].message


@pytest.mark.parametrize(
    ("field", "value"),
    [("aging_rate", -1.0), ("aging_bound_s", 0.0), ("max_jobs", 0), ("max_preemptors", 0)],
)
def test_an_invalid_policy_is_refused_naming_the_field(field: str, value: float) -> None:
    with pytest.raises(ValueError, match=field):
        SchedulerPolicy(**{field: value})  # type: ignore[arg-type]


def test_the_decision_does_not_depend_on_the_order_of_the_pending_list() -> None:
    jobs = [
        job(f"j{i}", [1, 2, 4, 8][i % 4], tenant="ab"[i % 2], priority=i % 3, at=float(i))
        for i in range(40)
    ]
    policy = SchedulerPolicy(order=QueueOrder.PRIORITY, fair_share=True, backfill=True)
    first = run_cycle(ClusterView(cluster(4)), jobs, policy=policy)
    again = run_cycle(ClusterView(cluster(4)), list(reversed(jobs)), policy=policy)
    assert first == again


def test_duplicate_job_ids_are_refused() -> None:
    with pytest.raises(ValueError, match="duplicate"):
        run_cycle(ClusterView(cluster(1)), [job("j"), job("j", at=1.0)])


def test_a_job_larger_than_the_cluster_never_holds_the_queue() -> None:
    d = run_cycle(ClusterView(cluster(1)), [job("huge", 8, tasks=2), job("small", 1, at=1.0)])
    assert d.pending_reasons["huge"].code is PendingCode.ADMISSION
    assert d.pending_reasons["huge"].message == "needs 16 GPUs; the cluster has 8"
    assert set(d.binds) == {"small"}


def test_a_nominated_job_gets_what_its_victims_freed_before_higher_priorities() -> None:
    import dataclasses

    policy = SchedulerPolicy(order=QueueOrder.PRIORITY, aging_bound_s=50.0)
    nominee = dataclasses.replace(job("nominee", 8, priority=1, at=90.0), nominated=True)
    urgent = job("urgent", 8, priority=9, at=95.0)
    d = run_cycle(ClusterView(cluster(1)), [urgent, nominee], now=100.0, policy=policy)
    assert set(d.binds) == {"nominee"}
    starving = job("starving", 8, priority=0, at=10.0)
    d = run_cycle(ClusterView(cluster(1)), [nominee, starving], now=100.0, policy=policy)
    assert set(d.binds) == {"starving"}  # the aging bound still comes first
