"""EASY backfill: a reservation for the head job; later jobs must not delay it. The
reservation time is checked against a linear scan of the running jobs' expected ends."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_platform.domain.placement import ClusterView, GangPlacement, place
from gpu_platform.domain.scheduling import PendingCode, RunningJob, SchedulerPolicy

from .helpers import cluster, job, run_cycle, start

BACKFILL = SchedulerPolicy(backfill=True)


def test_the_head_gets_a_reservation_at_the_earliest_end_that_frees_a_placement() -> None:
    view = ClusterView(cluster(2))
    running = [
        start(view, job("r-early", 4), end=150.0),  # n0
        start(view, job("r-late", 4), end=400.0),  # n0
        start(view, job("r-never", 4), end=None),  # n1
    ]
    d = run_cycle(view, [job("whole-node", 8, at=1.0)], running, policy=BACKFILL)
    assert d.reservation is not None
    # at 150 only half of n0 is free: the 8-GPU job fits on n0 once r-late ends
    assert d.reservation.job == "whole-node" and d.reservation.at == 400.0
    assert d.reservation.placement.nodes == ("n0",)
    assert d.pending_reasons["whole-node"].message.endswith("reserved at t=400 on n0")


def test_a_job_that_ends_before_the_reservation_may_use_the_reserved_gpus() -> None:
    view = ClusterView(cluster(1))
    running = [start(view, job("r", 4), end=200.0)]
    pending = [job("head", 8, at=1.0), job("short", 4, at=2.0, estimate=50.0)]
    d = run_cycle(view, pending, running, now=100.0, policy=BACKFILL)
    assert set(d.binds) == {"short"}  # ends at 150 <= 200


def test_a_job_that_would_delay_the_reservation_waits_with_reason_reservation() -> None:
    view = ClusterView(cluster(1))
    running = [start(view, job("r", 4), end=200.0)]
    pending = [
        job("head", 8, at=1.0),
        job("long", 4, at=2.0, estimate=500.0),
        job("unknown", 4, at=3.0),
    ]
    d = run_cycle(view, pending, running, now=100.0, policy=BACKFILL)
    assert d.binds == {}
    for name in ("long", "unknown"):
        assert d.pending_reasons[name].code is PendingCode.RESERVATION
        assert "reserved for head at t=200" in d.pending_reasons[name].message


def test_long_jobs_backfill_on_gpus_the_reservation_does_not_need() -> None:
    view = ClusterView(cluster(2))
    running = [start(view, job("r", 8), end=300.0), start(view, job("r2", 4), end=None)]
    pending = [job("head", 8, at=1.0), job("long", 4, at=2.0)]
    d = run_cycle(view, pending, running, now=100.0, policy=BACKFILL)
    assert d.reservation is not None and d.reservation.at == 300.0
    assert set(d.binds) == {"long"}  # n1's free half is not part of the reservation on n0


def test_a_head_blocked_by_jobs_without_a_time_limit_is_reserved_for_ever() -> None:
    view = ClusterView(cluster(1))
    running = [start(view, job("r", 4), end=None)]
    d = run_cycle(view, [job("head", 8), job("long", 4, at=1.0)], running, policy=BACKFILL)
    assert d.reservation is not None and math.isinf(d.reservation.at)
    assert d.pending_reasons["long"].code is PendingCode.RESERVATION
    assert "once jobs without a time limit end" in d.pending_reasons["long"].message


def test_without_backfill_nothing_passes_the_head() -> None:
    view = ClusterView(cluster(1))
    running = [start(view, job("r", 4), end=200.0)]
    pending = [job("head", 8, at=1.0), job("short", 4, at=2.0, estimate=50.0)]
    d = run_cycle(view, pending, running, now=100.0, policy=SchedulerPolicy())
    assert d.binds == {} and d.reservation is None


def test_a_gang_head_is_not_starved_by_a_stream_of_small_jobs() -> None:
    view = ClusterView(cluster(2))
    running = [start(view, job(f"r{i}", 2), end=100.0 + 10 * i) for i in range(8)]
    pending = [job("gang", 8, tasks=2, at=0.0)]
    pending += [job(f"s{i}", 1, at=1.0 + i, estimate=1000.0) for i in range(8)]
    d = run_cycle(view, pending, running, now=50.0, policy=BACKFILL)
    assert d.reservation is not None and d.reservation.at == 170.0
    assert d.binds == {}  # every GPU is reserved, and the small jobs end too late


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.sampled_from([1, 2, 2, 4, 8]), min_size=1, max_size=8),
    ends=st.lists(st.sampled_from([None, 110.0, 150.0, 200.0, 300.0]), min_size=8, max_size=8),
    head=st.sampled_from([(1, 8), (2, 8), (1, 4), (3, 4)]),
)
def test_the_reservation_time_matches_a_linear_scan_of_expected_ends(
    sizes: list[int], ends: list[float | None], head: tuple[int, int]
) -> None:
    view = ClusterView(cluster(3))
    running: list[RunningJob] = []
    for i, size in enumerate(sizes):
        pj = job(f"r{i}", size)
        if isinstance(place(pj.request, view), GangPlacement):
            running.append(start(view, pj, end=ends[i]))
    tasks, gpus = head
    head_job = job("head", gpus, tasks=tasks, at=1.0)
    d = run_cycle(view, [head_job], running, now=100.0, policy=BACKFILL)
    if "head" in d.binds:
        return
    order = sorted(
        running, key=lambda r: (math.inf if r.expected_end is None else r.expected_end, r.id)
    )
    expected = None
    for k in range(1, len(order) + 1):
        for r in order[:k]:
            for t in r.tasks:
                view.release(t)
        fits = isinstance(place(head_job.request, view), GangPlacement)
        for r in order[:k]:
            for t in r.tasks:
                view.bind(t)
        if fits:
            end = order[k - 1].expected_end
            expected = math.inf if end is None else end
            break
    if expected is None:
        assert d.reservation is None
    else:
        assert d.reservation is not None and d.reservation.at == expected
