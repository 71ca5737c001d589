"""Jobs waiting for a dependency: the scheduling cycle leaves them out of the decision (their
reason is given on request), which must decide exactly what deciding with them decides."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_platform.domain.model.job import JobSpec, JobState
from gpu_platform.domain.placement import ClusterView
from gpu_platform.domain.scheduling import PendingCode, Quota, SchedulerPolicy
from gpu_platform.domain.scheduling.dependencies import (
    dependency_reason,
    unmet_dependencies,
    waits_for_dependency,
)

from .helpers import cluster, job, run_cycle


def _spec(*deps: str) -> JobSpec:
    return JobSpec(("true",), depends_on=deps)


STATES = {"q": JobState.QUEUED, "r": JobState.RUNNING, "ok": JobState.COMPLETED}
STATES |= {"bad": JobState.FAILED, "gone": JobState.CANCELLED}


def test_a_job_waits_for_a_dependency_only_while_one_may_still_complete() -> None:
    def state_of(job_id: str) -> JobState:
        return STATES[job_id]

    assert waits_for_dependency(_spec("q"), state_of)
    assert waits_for_dependency(_spec("ok", "r"), state_of)
    assert not waits_for_dependency(_spec(), state_of)  # nothing to wait for
    assert not waits_for_dependency(_spec("ok"), state_of)  # may run now
    assert not waits_for_dependency(_spec("q", "bad"), state_of)  # the cycle must cancel it
    assert not waits_for_dependency(_spec("gone"), state_of)
    assert unmet_dependencies(_spec("ok", "q", "bad"), state_of) == {"q", "bad"}


def test_the_reason_names_every_unmet_dependency_in_order() -> None:
    reason = dependency_reason(frozenset({"j2", "j1"}))
    assert reason.code is PendingCode.DEPENDENCY
    assert reason.message == "waiting for j1, j2"


@settings(max_examples=60, deadline=None)
@given(
    shapes=st.lists(
        st.tuples(
            st.sampled_from(["a", "b", "c"]),  # tenant
            st.integers(1, 8),  # gpus
            st.integers(0, 3),  # priority
            st.booleans(),  # waits for a dependency
        ),
        min_size=1,
        max_size=14,
    ),
    max_jobs=st.integers(1, 6),
    backfill=st.booleans(),
    fair_share=st.booleans(),
    quota_a=st.none() | st.integers(0, 8),
)
def test_deciding_without_the_jobs_that_wait_for_a_dependency_decides_the_same(
    shapes: list[tuple[str, int, int, bool]],
    max_jobs: int,
    backfill: bool,
    fair_share: bool,
    quota_a: int | None,
) -> None:
    pending = [
        job(
            f"j{i}",
            gpus,
            tenant=tenant,
            priority=priority,
            at=float(i),
            waiting_on=frozenset({"dep"}) if waits else frozenset(),
        )
        for i, (tenant, gpus, priority, waits) in enumerate(shapes)
    ]
    policy = SchedulerPolicy(max_jobs=max_jobs, backfill=backfill, fair_share=fair_share)
    quotas = {} if quota_a is None else {"a": Quota(gpus=quota_a)}
    whole = run_cycle(ClusterView(cluster(2)), pending, quotas=quotas, policy=policy)
    runnable = [j for j in pending if not j.waiting_on]
    view = ClusterView(cluster(2))
    part = run_cycle(view, runnable, quotas=quotas, policy=policy) if runnable else None
    reasons = dict(part.pending_reasons) if part is not None else {}
    reasons |= {j.id: dependency_reason(j.waiting_on) for j in pending if j.waiting_on}
    assert (part.binds if part is not None else {}) == whole.binds
    assert reasons == dict(whole.pending_reasons)
    assert (part.preemptions if part is not None else ()) == whole.preemptions
    assert (part.examined if part is not None else 0) == whole.examined
    assert (part.reservation if part is not None else None) == whole.reservation
