"""Job arrays in the cluster state machine: one command creates every task, cancel takes them
all, each task is an ordinary job afterwards, and the codecs carry it all."""

from __future__ import annotations

import pytest

from gpu_platform.domain.cluster_codec import (
    decode_command,
    decode_state,
    encode_command,
    encode_state,
)
from gpu_platform.domain.cluster_state import (
    BindJob,
    CancelArray,
    CancelJob,
    ClusterState,
    StartJob,
    SubmitArray,
    SubmitJob,
)
from gpu_platform.domain.errors import Conflict, InvalidRequest, NotFound
from gpu_platform.domain.events import ArraySubmitted, JobBound, JobCancelled
from gpu_platform.domain.faults.policy import FaultPolicy
from gpu_platform.domain.model.job import JobSpec, JobState
from gpu_platform.domain.model.job_array import parse_array
from gpu_platform.domain.model.node import Inventory
from gpu_platform.domain.model_codec import job_from_dict, job_to_dict

SPEC = JobSpec(("true",), gpus=1, tenant="team-a")


def test_one_command_creates_a_queued_job_per_index_in_index_order(inventory: Inventory) -> None:
    state = ClusterState(inventory)
    state.apply(SubmitJob("j-0", SPEC, 1.0))
    (event,) = state.apply(SubmitArray("a", SPEC, parse_array("0-15:4%2"), 2.0))
    assert event == ArraySubmitted("a", ("a_0", "a_4", "a_8", "a_12"), 1)
    tasks = state.array_tasks("a")
    assert [t.id for t in tasks] == ["a_0", "a_4", "a_8", "a_12"]
    assert [t.seq for t in tasks] == [2, 3, 4, 5]
    assert all(t.state is JobState.QUEUED and t.spec is SPEC for t in tasks)
    assert [t.array.index for t in tasks if t.array] == [0, 4, 8, 12]
    assert [j.id for j in state.queued()] == ["j-0", "a_0", "a_4", "a_8", "a_12"]
    state.check_invariants()


def test_an_array_is_refused_as_a_single_job_would_be(inventory: Inventory) -> None:
    state = ClusterState(inventory)
    with pytest.raises(InvalidRequest) as caught:
        state.apply(SubmitArray("a", JobSpec(("true",), gpus=9), parse_array("0-3"), 1.0))
    assert caught.value.field == "gpus"
    assert state.jobs() == ()
    state.apply(SubmitArray("a", SPEC, parse_array("0-3"), 1.0))
    with pytest.raises(Conflict):
        state.apply(SubmitArray("a", SPEC, parse_array("0-3"), 1.0))
    with pytest.raises(NotFound):
        state.array_tasks("nope")


def test_cancelling_the_array_cancels_every_task_not_ended_and_stops_the_running_ones(
    inventory: Inventory,
) -> None:
    state = ClusterState(inventory)
    state.apply(SubmitArray("a", SPEC, parse_array("0-3"), 1.0))
    (bound,) = state.apply(BindJob("a_1", "node-0", (0,), 2.0))
    assert isinstance(bound, JobBound)
    state.apply(StartJob("a_1", bound.allocation.epoch, 3.0))
    state.apply(CancelJob("a_3", 4.0))  # one task, as any job
    events = state.apply(CancelArray("a", 5.0))
    assert [e.job_id for e in events if isinstance(e, JobCancelled)] == ["a_0", "a_1", "a_2"]
    stopped = [e for e in events if isinstance(e, JobCancelled) and e.stop is not None]
    assert [e.job_id for e in stopped] == ["a_1"]
    assert {t.state for t in state.array_tasks("a")} == {JobState.CANCELLED}
    state.check_invariants()


def test_the_commands_and_a_snapshot_round_trip_through_the_codecs(inventory: Inventory) -> None:
    command = SubmitArray("a", SPEC, parse_array("0-9,20%3"), 1.0)
    assert decode_command(encode_command(command)) == command
    cancel = CancelArray("a", 2.0, "because")
    assert decode_command(encode_command(cancel)) == cancel
    state = ClusterState(inventory)
    state.apply(command)
    restored = decode_state(encode_state(state), FaultPolicy())
    assert restored.array_tasks("a") == state.array_tasks("a")
    assert restored.array("a") == parse_array("0-9,20%3")
    task = state.job("a_20")
    assert job_from_dict(job_to_dict(task)) == task


def test_a_state_restored_from_jobs_knows_their_arrays(inventory: Inventory) -> None:
    state = ClusterState(inventory)
    state.apply(SubmitArray("a", SPEC, parse_array("0-2"), 1.0))
    again = ClusterState(inventory, state.jobs())
    assert [t.id for t in again.array_tasks("a")] == ["a_0", "a_1", "a_2"]
    assert again.next_seq == 4
