from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_platform.domain.accounting import gpu_seconds, running_intervals, running_seconds
from gpu_platform.domain.model.job import Job, JobSpec, JobState

S = JobState


def job(history: list[tuple[float, JobState]], gpus: int = 2) -> Job:
    return Job(
        "j-1",
        JobSpec(("x",), gpus=gpus),
        history[-1][1],
        0.0,
        history=tuple((t, s, "") for t, s in history),
    )


def test_a_finished_job_counts_from_start_to_end() -> None:
    j = job([(0, S.QUEUED), (10, S.SCHEDULED), (11, S.RUNNING), (71, S.COMPLETED)])
    assert running_intervals(j, until=1000) == [(11, 71)]
    assert gpu_seconds([j], 0, 1000) == {"j-1": 120.0}


def test_a_running_job_counts_up_to_now_and_a_window_clips_it() -> None:
    j = job([(0, S.QUEUED), (5, S.SCHEDULED), (5, S.RUNNING)])
    assert running_seconds(j, 0, 100) == 95
    assert running_seconds(j, 50, 60) == 10


def test_each_attempt_counts_separately_and_waiting_is_free() -> None:
    j = job(
        [
            (0, S.QUEUED), (1, S.SCHEDULED), (2, S.RUNNING), (12, S.PREEMPTED),
            (12, S.QUEUED), (30, S.SCHEDULED), (30, S.RUNNING), (40, S.COMPLETED),
        ],
        gpus=4,
    )  # fmt: skip
    assert running_intervals(j, 100) == [(2, 12), (30, 40)]
    assert gpu_seconds([j], 0, 100)["j-1"] == 80


def test_a_job_that_never_ran_costs_nothing() -> None:
    assert running_seconds(job([(0, S.QUEUED), (3, S.CANCELLED)]), 0, 10) == 0


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 50), st.sampled_from(list(JobState))), max_size=12),
    st.integers(0, 400),
    st.integers(0, 400),
    st.integers(0, 400),
)
def test_windows_add_up(steps: list[tuple[int, JobState]], a: int, b: int, c: int) -> None:
    t, history = 0.0, []
    for dt, state in steps:
        t += dt
        history.append((t, state))
    if not history:
        return
    j = job(history)
    lo, mid, hi = sorted((a, b, c))
    total = running_seconds(j, lo, hi)
    assert abs(running_seconds(j, lo, mid) + running_seconds(j, mid, hi) - total) < 1e-9
    assert 0 <= total <= hi - lo
