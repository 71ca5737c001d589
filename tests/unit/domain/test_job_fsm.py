"""The job state table is complete: every state against every input has a defined outcome."""

from __future__ import annotations

import itertools

import pytest

from gpu_platform.domain.errors import IllegalTransition
from gpu_platform.domain.faults.job_fsm import JOB_TRANSITIONS, JobEffect, JobInput, transition
from gpu_platform.domain.model.job import TERMINAL_JOB_STATES, Allocation, Job, JobSpec, JobState

ALLOC = Allocation("n0", (0,), ("GPU-0",), epoch=1)


def job_in(state: JobState) -> Job:
    return Job("j-1", JobSpec(("true",), gpus=1), state, 0.0, allocation=ALLOC, attempt=1)


@pytest.mark.parametrize(("state", "event"), list(itertools.product(JobState, JobInput)))
def test_every_state_and_input_pair_is_either_a_listed_move_or_an_error(
    state: JobState, event: JobInput
) -> None:
    job = job_in(state)
    if (state, event) in JOB_TRANSITIONS:
        new, effects = transition(job, event, 5.0, allocation=ALLOC)
        assert (new.state, effects) == JOB_TRANSITIONS[(state, event)]
        assert new.history[-1][:2] == (5.0, new.state)
    else:
        with pytest.raises(IllegalTransition):
            transition(job, event, 5.0, allocation=ALLOC)


def test_terminal_states_have_no_way_out() -> None:
    for state, _ in JOB_TRANSITIONS:
        assert state not in TERMINAL_JOB_STATES


def test_every_non_terminal_state_can_be_cancelled() -> None:
    for state in set(JobState) - TERMINAL_JOB_STATES:
        assert JOB_TRANSITIONS[(state, JobInput.CANCEL)][0] is JobState.CANCELLED


def test_every_state_is_reachable_from_pending() -> None:
    seen, frontier = {JobState.PENDING}, [JobState.PENDING]
    while frontier:
        state = frontier.pop()
        for (src, _), (dst, _) in JOB_TRANSITIONS.items():
            if src is state and dst not in seen:
                seen.add(dst)
                frontier.append(dst)
    assert seen == set(JobState)


def test_leaving_a_gpu_holding_state_either_releases_or_stops_never_both_nor_neither() -> None:
    for (src, _), (dst, effects) in JOB_TRANSITIONS.items():
        holds_before = src in (JobState.SCHEDULED, JobState.RUNNING)
        holds_after = dst in (JobState.SCHEDULED, JobState.RUNNING)
        if holds_before and not holds_after:
            assert (JobEffect.RELEASE_GPUS in effects) != (JobEffect.STOP_PROCESS in effects)


def test_a_stop_marks_the_job_releasing_until_its_process_ends() -> None:
    stopped, effects = transition(job_in(JobState.RUNNING), JobInput.CANCEL, 5.0)
    assert effects is JobEffect.STOP_PROCESS
    assert stopped.releasing and stopped.holds_gpus


def test_bind_starts_a_new_attempt_and_clears_the_last_outcome() -> None:
    job = Job("j-1", JobSpec(("true",), gpus=1), JobState.QUEUED, 0.0, attempt=1, exit_code=3)
    bound, _ = transition(job, JobInput.BIND, 1.0, allocation=ALLOC)
    assert (bound.attempt, bound.exit_code, bound.allocation) == (2, None, ALLOC)


def test_bind_without_an_allocation_is_refused() -> None:
    job = Job("j-1", JobSpec(("true",), gpus=1), JobState.QUEUED, 0.0)
    with pytest.raises(ValueError, match="allocation"):
        transition(job, JobInput.BIND, 1.0)


def test_terminal_moves_stamp_the_finish_time() -> None:
    running = job_in(JobState.RUNNING)
    done, _ = transition(running, JobInput.COMPLETE, 9.0, exit_code=0)
    assert (done.finished_at, done.exit_code) == (9.0, 0)
