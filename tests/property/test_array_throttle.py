"""The array throttle (`%N`): whatever order tasks are bound, finished and cancelled in, never
more than N tasks of one array hold GPUs at once; tasks held back say why."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_platform.adapters.outbound.sim import default_node
from gpu_platform.domain.cluster_state import (
    BindJob,
    CancelJob,
    ClusterState,
    FinishJob,
    StartJob,
    SubmitArray,
    SubmitJob,
)
from gpu_platform.domain.model.job import JobSpec, JobState
from gpu_platform.domain.model.job_array import ArraySpec
from gpu_platform.domain.model.node import Inventory
from gpu_platform.domain.scheduling.array_throttle import hold_back_throttled
from gpu_platform.domain.scheduling.model import PendingCode

SPEC = JobSpec(("true",), gpus=1)


def holding(state: ClusterState, array_id: str) -> int:
    return sum(1 for t in state.array_tasks(array_id) if t.holds_gpus)


def cycle(state: ClusterState, now: float) -> None:
    """A greedy scheduler: bind every eligible job to any free GPU, in queue order."""
    eligible, held = hold_back_throttled(state.queued(), [j for j in state.jobs() if j.holds_gpus])
    assert all(r.code is PendingCode.ARRAY_THROTTLE for r in held.values())
    for job in eligible:
        free = [g.index for v in state.node_views() for g in v.free]
        if not free:
            return
        (bound,) = state.apply(BindJob(job.id, "node-0", (free[0],), now))
        state.apply(StartJob(job.id, bound.allocation.epoch, now))  # type: ignore[union-attr]


@settings(max_examples=60, deadline=None)
@given(
    arrays=st.lists(st.tuples(st.integers(1, 12), st.integers(0, 4)), min_size=1, max_size=3),
    steps=st.lists(st.tuples(st.sampled_from(["cycle", "finish", "cancel"]), st.integers(0, 99))),
)
def test_never_more_than_the_throttle_of_an_array_holds_gpus_at_once(
    arrays: list[tuple[int, int]], steps: list[tuple[str, int]]
) -> None:
    state = ClusterState(Inventory((default_node(),), source="sim", simulated=True))
    state.apply(SubmitJob("single", SPEC, 0.0))
    for n, (count, throttle) in enumerate(arrays):
        state.apply(SubmitArray(f"a{n}", SPEC, ArraySpec(tuple(range(count)), throttle), 0.0))
    for t, (step, pick) in enumerate(steps, start=1):
        jobs = state.jobs()
        if step == "cycle":
            cycle(state, float(t))
        elif step == "finish":
            running = [j for j in jobs if j.state is JobState.RUNNING]
            if running:
                job = running[pick % len(running)]
                assert job.allocation is not None
                state.apply(FinishJob(job.id, job.allocation.epoch, pick % 2, float(t)))
        else:
            live = [j for j in jobs if not j.terminal]
            if live:
                job = live[pick % len(live)]
                state.apply(CancelJob(job.id, float(t)))
                if job.allocation is not None and job.holds_gpus:  # its process ends
                    state.apply(FinishJob(job.id, job.allocation.epoch, None, float(t)))
        for n, (count, throttle) in enumerate(arrays):
            limit = min(throttle or count, count)
            assert holding(state, f"a{n}") <= limit
        state.check_invariants()


def test_tasks_beyond_the_throttle_are_held_back_with_the_reason() -> None:
    state = ClusterState(Inventory((default_node(),), source="sim", simulated=True))
    state.apply(SubmitArray("a", SPEC, ArraySpec(tuple(range(5)), 2), 0.0))
    cycle(state, 1.0)
    assert holding(state, "a") == 2
    eligible, held = hold_back_throttled(state.queued(), [j for j in state.jobs() if j.holds_gpus])
    assert eligible == []
    assert sorted(held) == ["a_2", "a_3", "a_4"]
    assert "at most 2 tasks at once" in held["a_2"].message
