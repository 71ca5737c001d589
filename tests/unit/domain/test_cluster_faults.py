"""Faults and operations in the cluster state machine: who is stopped, re-queued or failed,
what may be placed where, and how old attempts are fenced."""

from __future__ import annotations

import pytest

from gpu_platform.domain.cluster_state import (
    BindJob,
    CheckNodes,
    ClusterState,
    CompleteGpuReset,
    FinishJob,
    NodeHeartbeat,
    ReportEcc,
    ReportGpuLost,
    ReportThermal,
    ReportXid,
    SetGpuAdmin,
    SetNodeAdmin,
    StartJob,
    SubmitJob,
)
from gpu_platform.domain.errors import Conflict, IllegalTransition
from gpu_platform.domain.events import (
    AttemptEnded,
    EccAlertRaised,
    GpuStateChanged,
    GpuThermalChanged,
    JobAborted,
    JobBound,
    JobRequeued,
    NodeStateChanged,
    StaleReportIgnored,
    XidReported,
)
from gpu_platform.domain.faults.commands import HardwareRecord
from gpu_platform.domain.faults.policy import FaultPolicy
from gpu_platform.domain.model.gpu import GpuState
from gpu_platform.domain.model.job import JobSpec, JobState
from gpu_platform.domain.model.node import Inventory, NodeState

N = "node-0"


def run(
    state: ClusterState, job_id: str, gpus: tuple[int, ...], *, attempts: int = 3, t: float = 1.0
) -> int:
    """Submit (if new), bind to `gpus` and start; return the attempt's epoch."""
    if job_id not in {j.id for j in state.jobs()}:
        spec = JobSpec(("true",), gpus=len(gpus), max_attempts=attempts, retry_backoff_s=0.0)
        state.apply(SubmitJob(job_id, spec, t))
    (bound,) = state.apply(BindJob(job_id, N, gpus, t))
    assert isinstance(bound, JobBound)
    state.apply(StartJob(job_id, bound.allocation.epoch, t))
    return bound.allocation.epoch


def gpu(state: ClusterState, index: int) -> GpuState:
    return state.node(N).gpu(index).state


def free(state: ClusterState) -> set[int]:
    return {g.index for v in state.node_views() for g in v.free}


@pytest.fixture
def state(inventory: Inventory) -> ClusterState:
    return ClusterState(inventory)


def test_xid_79_takes_the_gpu_offline_and_requeues_its_job_which_keeps_the_gpus_until_it_ends(
    state: ClusterState,
) -> None:
    epoch = run(state, "j", (3,))
    events = state.apply(ReportXid(N, 3, 79, 5.0))
    assert XidReported(N, 3, 79, "reboot") in events
    assert any(isinstance(e, GpuStateChanged) and e.new is GpuState.OFFLINE for e in events)
    (requeued,) = [e for e in events if isinstance(e, JobRequeued)]
    assert requeued.stop is not None and requeued.stop.epoch == epoch
    job = state.job("j")
    assert (job.state, job.releasing) == (JobState.QUEUED, True)
    assert "xid 79" in job.reason
    assert state.queued() == []  # not before its old process has ended
    assert state.apply(FinishJob("j", epoch, None, 6.0)) == [AttemptEnded("j", epoch, None)]
    assert [j.id for j in state.queued()] == ["j"]
    assert 3 not in free(state)
    state.check_invariants()


def test_the_requeued_job_runs_again_elsewhere_with_a_newer_epoch_and_old_reports_are_ignored(
    state: ClusterState,
) -> None:
    old = run(state, "j", (3,))
    state.apply(ReportXid(N, 3, 79, 5.0))
    state.apply(FinishJob("j", old, None, 6.0))
    with pytest.raises(Conflict, match="OFFLINE"):
        state.apply(BindJob("j", N, (3,), 7.0))
    new = run(state, "j", (4,))
    assert new > old
    assert state.job("j").attempt == 2
    late = state.apply(FinishJob("j", old, 0, 8.0))
    assert isinstance(late[0], StaleReportIgnored)
    assert state.job("j").state is JobState.RUNNING
    state.check_invariants()


def test_a_job_out_of_attempts_fails_with_the_fault_as_its_reason(state: ClusterState) -> None:
    epoch = run(state, "j", (0,), attempts=1)
    events = state.apply(ReportGpuLost(N, 0, 5.0, "GPU is lost"))
    (aborted,) = [e for e in events if isinstance(e, JobAborted)]
    job = state.job("j")
    assert job.state is JobState.FAILED
    assert "GPU is lost" in job.reason and "no attempts left (1 of 1 ended by faults)" in job.reason
    assert aborted.stop is not None and aborted.stop.epoch == epoch
    assert job.releasing  # its process is still being stopped
    state.apply(FinishJob("j", epoch, None, 6.0))
    assert state.job("j").state is JobState.FAILED
    state.check_invariants()


def test_a_gang_restarts_whole_when_one_of_its_gpus_fails(state: ClusterState) -> None:
    epoch = run(state, "gang", (0, 1, 2, 3))
    state.apply(ReportXid(N, 2, 79, 5.0))
    state.apply(FinishJob("gang", epoch, None, 6.0))
    job = state.job("gang")
    assert job.state is JobState.QUEUED and not job.releasing
    assert free(state) == {0, 1, 3, 4, 5, 6, 7}
    run(state, "gang", (4, 5, 6, 7))
    state.check_invariants()


def test_a_job_level_xid_requeues_the_job_but_keeps_the_gpu_healthy(state: ClusterState) -> None:
    run(state, "j", (1,))
    events = state.apply(ReportXid(N, 1, 13, 5.0))
    assert not any(isinstance(e, GpuStateChanged) for e in events)
    assert gpu(state, 1) is GpuState.AVAILABLE
    assert state.job("j").state is JobState.QUEUED


def test_an_informational_xid_changes_nothing(state: ClusterState) -> None:
    run(state, "j", (1,))
    assert state.apply(ReportXid(N, 1, 43, 5.0)) == [XidReported(N, 1, 43, "ignore")]
    assert state.job("j").state is JobState.RUNNING


def test_an_unhealthy_xid_degrades_the_gpu_until_an_operator_brings_it_back(
    state: ClusterState,
) -> None:
    run(state, "j", (1,))
    state.apply(ReportXid(N, 1, 54, 5.0))
    assert gpu(state, 1) is GpuState.DEGRADED
    assert state.job("j").state is JobState.QUEUED
    state.apply(SetGpuAdmin(N, 1, "online", "power cable reseated", 6.0))
    assert gpu(state, 1) is GpuState.AVAILABLE


def test_a_reset_class_xid_resets_the_gpu_only_once_its_attempt_has_ended(
    state: ClusterState,
) -> None:
    epoch = run(state, "j", (5,))
    state.apply(ReportXid(N, 5, 48, 5.0))
    assert gpu(state, 5) is GpuState.RESETTING
    assert state.resets_due() == []  # the old process may still use the GPU
    with pytest.raises(Conflict, match="still held"):
        state.apply(CompleteGpuReset(N, 5, True, 5.5))
    state.apply(FinishJob("j", epoch, None, 6.0))
    assert [g.index for g in state.resets_due()] == [5]
    state.apply(CompleteGpuReset(N, 5, True, 7.0))
    assert gpu(state, 5) is GpuState.AVAILABLE
    assert 5 in free(state)


def test_a_failed_reset_takes_the_gpu_offline(state: ClusterState) -> None:
    state.apply(ReportXid(N, 5, 95, 5.0))
    state.apply(CompleteGpuReset(N, 5, False, 6.0, "nvidia-smi exited 1"))
    assert gpu(state, 5) is GpuState.OFFLINE
    assert "nvidia-smi exited 1" in state.reason(state.node(N).gpu(5).uuid)


def test_an_operator_cannot_online_or_drain_a_gpu_while_it_is_being_reset(
    state: ClusterState,
) -> None:
    state.apply(ReportXid(N, 5, 95, 5.0))
    with pytest.raises(IllegalTransition):
        state.apply(SetGpuAdmin(N, 5, "online", "", 6.0))
    with pytest.raises(IllegalTransition):
        state.apply(SetGpuAdmin(N, 5, "drain", "", 6.0))


def test_uncorrectable_ecc_resets_remap_failure_offlines_and_corrected_errors_alert_once(
    inventory: Inventory,
) -> None:
    state = ClusterState(inventory, policy=FaultPolicy(ecc_corrected_alert=100))
    state.apply(ReportEcc(N, 0, 0, 2, False, False, 1.0))
    assert gpu(state, 0) is GpuState.RESETTING
    state.apply(ReportEcc(N, 1, 0, 0, False, True, 1.0))
    assert gpu(state, 1) is GpuState.OFFLINE
    state.apply(ReportEcc(N, 2, 0, 0, True, False, 1.0))
    assert gpu(state, 2) is GpuState.RESETTING
    assert state.apply(ReportEcc(N, 3, 150, 0, False, False, 1.0)) == [EccAlertRaised(N, 3, 150)]
    assert state.apply(ReportEcc(N, 3, 160, 0, False, False, 2.0)) == []
    assert gpu(state, 3) is GpuState.AVAILABLE


def test_uncorrectable_errors_already_acted_on_do_not_reset_the_gpu_again(
    state: ClusterState,
) -> None:
    state.apply(ReportEcc(N, 0, 0, 2, False, False, 1.0))
    state.apply(SetGpuAdmin(N, 0, "offline", "", 2.0))
    state.apply(SetGpuAdmin(N, 0, "online", "", 3.0))
    state.apply(ReportEcc(N, 0, 0, 2, False, False, 4.0))
    assert gpu(state, 0) is GpuState.AVAILABLE


def test_a_hot_gpu_takes_no_new_work_until_it_has_cooled_below_the_low_mark(
    state: ClusterState,
) -> None:
    run(state, "j", (6,))
    events = state.apply(ReportThermal(N, 7, 93.0, 0, 1.0))
    assert events == [GpuThermalChanged(N, 7, True, 93.0)]
    assert 7 not in free(state)
    state.apply(SubmitJob("k", JobSpec(("true",), gpus=1), 1.0))
    with pytest.raises(Conflict, match="too hot"):
        state.apply(BindJob("k", N, (7,), 1.0))
    state.apply(ReportThermal(N, 6, 95.0, 0, 1.0))
    assert state.job("j").state is JobState.RUNNING  # running work is not stopped
    assert state.apply(ReportThermal(N, 7, 85.0, 0, 2.0)) == []  # hysteresis
    assert 7 not in free(state)
    assert state.apply(ReportThermal(N, 7, 79.0, 0, 3.0)) == [GpuThermalChanged(N, 7, False, 79.0)]
    assert 7 in free(state)


def test_a_drained_gpu_lets_its_job_finish_and_takes_no_new_work(state: ClusterState) -> None:
    epoch = run(state, "j", (2,))
    state.apply(SetGpuAdmin(N, 2, "drain", "maintenance", 5.0))
    assert state.job("j").state is JobState.RUNNING
    assert state.gpu_state(state.node(N).gpu(2)) is GpuState.DRAINING
    assert 2 not in free(state)
    state.apply(FinishJob("j", epoch, 0, 6.0))
    assert state.job("j").state is JobState.COMPLETED
    assert 2 not in free(state)
    state.apply(SetGpuAdmin(N, 2, "online", "done", 7.0))
    assert 2 in free(state)


def test_offline_of_a_busy_gpu_needs_force_which_requeues_its_job(state: ClusterState) -> None:
    run(state, "j", (2,))
    with pytest.raises(Conflict, match="runs job j"):
        state.apply(SetGpuAdmin(N, 2, "offline", "", 5.0))
    assert gpu(state, 2) is GpuState.AVAILABLE
    state.apply(SetGpuAdmin(N, 2, "offline", "bad fan", 5.0, force=True))
    assert gpu(state, 2) is GpuState.OFFLINE
    assert state.job("j").state is JobState.QUEUED


def test_a_fault_on_a_gpu_whose_job_completed_leaves_the_completed_job_alone(
    state: ClusterState,
) -> None:
    epoch = run(state, "j", (2,))
    state.apply(FinishJob("j", epoch, 0, 5.0))
    state.apply(ReportXid(N, 2, 79, 6.0))
    assert state.job("j").state is JobState.COMPLETED
    assert state.queued() == []


def test_a_silent_node_turns_suspect_then_down_and_its_jobs_are_requeued(
    inventory: Inventory,
) -> None:
    policy = FaultPolicy(node_suspect_after_s=10, node_down_after_s=30)
    state = ClusterState(inventory, policy=policy)
    state.apply(NodeHeartbeat(N, 0.0))
    run(state, "j", (0, 1))
    assert state.apply(CheckNodes(9.0)) == []
    (suspect,) = state.apply(CheckNodes(10.0))
    assert suspect == NodeStateChanged(
        N, NodeState.READY, NodeState.SUSPECT, "no heartbeat for 10s"
    )
    assert free(state) == set()  # nothing new lands on a suspect node
    assert state.job("j").state is JobState.RUNNING
    events = state.apply(CheckNodes(30.0))
    assert state.node(N).state is NodeState.DOWN
    assert any(isinstance(e, JobRequeued) for e in events)
    assert "node node-0" in state.job("j").reason
    state.apply(NodeHeartbeat(N, 31.0))
    assert state.node(N).state is NodeState.DOWN  # back only by an operator
    state.apply(SetNodeAdmin(N, "online", "checked", 32.0))
    assert state.node(N).state is NodeState.READY
    assert state.apply(CheckNodes(40.0)) == []  # online restarted its heartbeat clock
    state.check_invariants()


def test_a_heartbeat_clears_a_suspect_node(state: ClusterState) -> None:
    state.apply(CheckNodes(0.0))
    state.apply(CheckNodes(20.0))
    assert state.node(N).state is NodeState.SUSPECT
    state.apply(NodeHeartbeat(N, 21.0))
    assert state.node(N).state is NodeState.READY


def test_a_drained_node_takes_no_new_work_and_forced_offline_requeues_its_jobs(
    state: ClusterState,
) -> None:
    run(state, "j", (0,))
    state.apply(SetNodeAdmin(N, "drain", "kernel update", 2.0))
    assert free(state) == set() and state.job("j").state is JobState.RUNNING
    with pytest.raises(Conflict, match="drain it, or offline with force"):
        state.apply(SetNodeAdmin(N, "offline", "", 3.0))
    state.apply(SetNodeAdmin(N, "offline", "", 3.0, force=True))
    assert state.node(N).state is NodeState.DOWN
    assert state.job("j").state is JobState.QUEUED
    with pytest.raises(IllegalTransition):
        state.apply(SetNodeAdmin(N, "drain", "", 4.0))


def test_restart_backoff_keeps_a_requeued_job_out_of_the_queue_until_its_time(
    state: ClusterState,
) -> None:
    spec = JobSpec(("true",), gpus=1, retry_backoff_s=5.0)
    state.apply(SubmitJob("j", spec, 0.0))
    (bound,) = state.apply(BindJob("j", N, (0,), 0.0))
    assert isinstance(bound, JobBound)
    state.apply(ReportXid(N, 0, 13, 10.0))
    state.apply(FinishJob("j", bound.allocation.epoch, None, 10.0))
    assert state.job("j").not_before == 15.0
    assert state.queued(14.9) == []
    assert [j.id for j in state.queued(15.0)] == ["j"]


def test_persisted_gpu_and_node_states_are_restored(inventory: Inventory) -> None:
    uuid = inventory.nodes[0].gpu(4).uuid
    records = [
        HardwareRecord("gpu", uuid, "OFFLINE", "xid 79 (reboot)", 1.0),
        HardwareRecord("gpu", "GPU-gone", "OFFLINE", "", 1.0),
        HardwareRecord("node", N, "DRAINING", "maintenance", 1.0),
    ]
    state = ClusterState(inventory, hardware=records)
    assert gpu(state, 4) is GpuState.OFFLINE
    assert state.reason(uuid) == "xid 79 (reboot)"
    assert state.node(N).state is NodeState.DRAINING


def test_a_gpu_less_job_on_a_node_that_goes_down_is_requeued_too(state: ClusterState) -> None:
    state.apply(SubmitJob("cpu", JobSpec(("true",), gpus=0), 1.0))
    (bound,) = state.apply(BindJob("cpu", N, (), 1.0))
    assert isinstance(bound, JobBound)
    state.apply(StartJob("cpu", bound.allocation.epoch, 1.0))
    with pytest.raises(Conflict, match="runs 1 jobs"):
        state.apply(SetNodeAdmin(N, "offline", "", 2.0))
    state.apply(SetNodeAdmin(N, "offline", "", 2.0, force=True))
    assert state.job("cpu").state is JobState.QUEUED
    state.check_invariants()
