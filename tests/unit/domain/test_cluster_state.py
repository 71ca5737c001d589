from __future__ import annotations

import pytest

from gpu_platform.domain.cluster_state import (
    AbortJob,
    BindJob,
    CancelJob,
    ClusterState,
    FinishJob,
    RequeueJob,
    StartJob,
    SubmitJob,
)
from gpu_platform.domain.errors import Conflict, InvalidRequest, NotFound
from gpu_platform.domain.events import (
    AttemptEnded,
    JobAborted,
    JobBound,
    JobCancelled,
    JobFinished,
    JobRequeued,
    StaleReportIgnored,
)
from gpu_platform.domain.model.gpu import GpuState
from gpu_platform.domain.model.job import JobSpec, JobState
from gpu_platform.domain.model.node import Inventory


def spec(gpus: int) -> JobSpec:
    return JobSpec(("true",), gpus=gpus)


def running(state: ClusterState, job_id: str, gpus: tuple[int, ...]) -> int:
    state.apply(SubmitJob(job_id, spec(len(gpus)), 1.0))
    (bound,) = state.apply(BindJob(job_id, "node-0", gpus, 2.0))
    assert isinstance(bound, JobBound)
    state.apply(StartJob(job_id, bound.allocation.epoch, 3.0))
    return bound.allocation.epoch


def test_a_submitted_job_is_queued_in_submission_order(inventory: Inventory) -> None:
    state = ClusterState(inventory)
    for i in range(3):
        state.apply(SubmitJob(f"j-{2 - i}", spec(1), 1.0))
    assert [j.id for j in state.queued()] == ["j-2", "j-1", "j-0"]
    assert all(j.state is JobState.QUEUED for j in state.jobs())


def test_a_job_bigger_than_any_node_is_rejected_naming_the_gpus_field(
    inventory: Inventory,
) -> None:
    state = ClusterState(inventory)
    with pytest.raises(InvalidRequest) as err:
        state.apply(SubmitJob("j-1", spec(9), 1.0))
    assert err.value.field == "gpus"
    assert state.jobs() == ()


def test_a_duplicate_job_id_is_a_conflict(inventory: Inventory) -> None:
    state = ClusterState(inventory)
    state.apply(SubmitJob("j-1", spec(1), 1.0))
    with pytest.raises(Conflict):
        state.apply(SubmitJob("j-1", spec(1), 1.0))


def test_a_bind_to_a_held_gpu_is_refused_and_changes_nothing(inventory: Inventory) -> None:
    state = ClusterState(inventory)
    running(state, "j-1", (0, 1))
    state.apply(SubmitJob("j-2", spec(2), 1.0))
    with pytest.raises(Conflict, match="held by j-1"):
        state.apply(BindJob("j-2", "node-0", (1, 2), 2.0))
    assert state.job("j-2").state is JobState.QUEUED
    state.check_invariants()


@pytest.mark.parametrize(
    ("node", "gpus", "error"),
    [
        ("node-9", (0, 1), NotFound),
        ("node-0", (0, 42), NotFound),
        ("node-0", (0, 0), Conflict),
        ("node-0", (0, 1, 2), Conflict),
    ],
)
def test_bad_binds_are_refused(
    inventory: Inventory, node: str, gpus: tuple[int, ...], error: type[Exception]
) -> None:
    state = ClusterState(inventory)
    state.apply(SubmitJob("j-1", spec(2), 1.0))
    with pytest.raises(error):
        state.apply(BindJob("j-1", node, gpus, 2.0))


def test_effective_gpu_state_follows_the_holding_job(inventory: Inventory) -> None:
    state = ClusterState(inventory)
    node = inventory.nodes[0]
    state.apply(SubmitJob("j-1", spec(1), 1.0))
    (bound,) = state.apply(BindJob("j-1", "node-0", (3,), 2.0))
    assert state.gpu_state(node.gpu(3)) is GpuState.ALLOCATED
    assert isinstance(bound, JobBound)
    state.apply(StartJob("j-1", bound.allocation.epoch, 3.0))
    assert state.gpu_state(node.gpu(3)) is GpuState.IN_USE
    assert state.gpu_state(node.gpu(4)) is GpuState.AVAILABLE


def test_exit_zero_completes_and_nonzero_fails_and_both_release(inventory: Inventory) -> None:
    state = ClusterState(inventory)
    e1 = running(state, "j-1", (0,))
    e2 = running(state, "j-2", (1,))
    (done,) = state.apply(FinishJob("j-1", e1, 0, 5.0))
    (failed,) = state.apply(FinishJob("j-2", e2, 2, 5.0))
    assert isinstance(done, JobFinished) and done.state is JobState.COMPLETED
    assert isinstance(failed, JobFinished) and failed.state is JobState.FAILED
    assert state.job("j-2").reason == "exited 2"
    assert all(len(v.free) == 8 for v in state.node_views())


def test_a_report_from_an_old_attempt_is_ignored(inventory: Inventory) -> None:
    state = ClusterState(inventory)
    old = running(state, "j-1", (0,))
    state.apply(RequeueJob("j-1", old, 4.0, "node lost"))
    state.apply(FinishJob("j-1", old, None, 4.5))
    (bound,) = state.apply(BindJob("j-1", "node-0", (5,), 5.0))
    assert isinstance(bound, JobBound) and bound.allocation.epoch > old
    (event,) = state.apply(FinishJob("j-1", old, 0, 6.0))
    assert isinstance(event, StaleReportIgnored)
    assert state.job("j-1").state is JobState.SCHEDULED
    assert state.job("j-1").attempt == 2


def test_a_cancelled_job_keeps_its_gpus_until_its_process_has_ended(
    inventory: Inventory,
) -> None:
    state = ClusterState(inventory)
    epoch = running(state, "j-1", (0, 1))
    (event,) = state.apply(CancelJob("j-1", 5.0))
    assert isinstance(event, JobCancelled)
    assert event.stop is not None and event.stop.epoch == epoch
    assert state.job("j-1").state is JobState.CANCELLED
    assert [len(v.free) for v in state.node_views()] == [6]
    state.apply(SubmitJob("j-2", spec(8), 6.0))
    with pytest.raises(Conflict, match="held by j-1"):
        state.apply(BindJob("j-2", "node-0", tuple(range(8)), 6.0))
    (ended,) = state.apply(FinishJob("j-1", epoch, None, 7.0))
    assert isinstance(ended, AttemptEnded)
    assert state.job("j-1").state is JobState.CANCELLED  # the exit does not rewrite history
    assert [len(v.free) for v in state.node_views()] == [8]
    state.check_invariants()


def test_abort_fails_the_job_and_holds_gpus_until_the_process_ends(inventory: Inventory) -> None:
    state = ClusterState(inventory)
    epoch = running(state, "j-1", (0,))
    (event,) = state.apply(AbortJob("j-1", epoch, 5.0, "shutdown"))
    assert isinstance(event, JobAborted) and event.stop is not None
    assert state.job("j-1").state is JobState.FAILED
    assert state.job("j-1").releasing
    state.apply(FinishJob("j-1", epoch, None, 6.0))
    assert not state.job("j-1").releasing
    state.check_invariants()


def test_cancelling_a_queued_job_stops_nothing(inventory: Inventory) -> None:
    state = ClusterState(inventory)
    state.apply(SubmitJob("j-1", spec(1), 1.0))
    (event,) = state.apply(CancelJob("j-1", 2.0))
    assert isinstance(event, JobCancelled) and event.stop is None


def test_cancelling_an_ended_job_is_a_conflict(inventory: Inventory) -> None:
    state = ClusterState(inventory)
    epoch = running(state, "j-1", (0,))
    state.apply(FinishJob("j-1", epoch, 0, 5.0))
    with pytest.raises(Conflict, match="already ended"):
        state.apply(CancelJob("j-1", 6.0))


def test_a_requeued_job_waits_for_its_old_attempt_to_end_before_it_is_bound_again(
    inventory: Inventory,
) -> None:
    state = ClusterState(inventory)
    epoch = running(state, "j-1", (0, 1))
    (event,) = state.apply(RequeueJob("j-1", epoch, 5.0, "lost"))
    assert isinstance(event, JobRequeued) and event.stop is not None
    job = state.job("j-1")
    assert job.state is JobState.QUEUED
    assert [h[1] for h in job.history[-2:]] == [JobState.PREEMPTED, JobState.QUEUED]
    assert state.queued() == []
    with pytest.raises(Conflict, match="still being stopped"):
        state.apply(BindJob("j-1", "node-0", (4, 5), 6.0))
    state.apply(FinishJob("j-1", epoch, -9, 7.0))
    assert [j.id for j in state.queued()] == ["j-1"]
    assert all(len(v.free) == 8 for v in state.node_views())


def test_state_rebuilt_from_saved_jobs_keeps_holds_and_epochs(inventory: Inventory) -> None:
    state = ClusterState(inventory)
    epoch = running(state, "j-1", (2, 3))
    state.apply(SubmitJob("j-2", spec(1), 1.0))
    again = ClusterState(inventory, state.jobs())
    again.check_invariants()
    assert again.next_epoch == epoch + 1
    assert [len(v.free) for v in again.node_views()] == [6]
    again.apply(SubmitJob("j-3", spec(1), 1.0))
    assert again.job("j-3").seq > again.job("j-2").seq


def test_saved_jobs_that_share_a_gpu_are_refused_on_restore(inventory: Inventory) -> None:
    state = ClusterState(inventory)
    running(state, "j-1", (0,))
    from dataclasses import replace

    clash = replace(state.job("j-1"), id="j-2", seq=99)
    with pytest.raises(Conflict):
        ClusterState(inventory, [state.job("j-1"), clash])


def test_a_gpu_less_job_is_never_bound_to_a_node_that_is_not_ready(inventory: Inventory) -> None:
    from dataclasses import replace

    from gpu_platform.domain.model.node import NodeState

    down = Inventory((replace(inventory.nodes[0], state=NodeState.DOWN),), "sim", True)
    state = ClusterState(down)
    state.apply(SubmitJob("j-1", spec(0), 1.0))
    with pytest.raises(Conflict, match="DOWN"):
        state.apply(BindJob("j-1", "node-0", (), 2.0))
