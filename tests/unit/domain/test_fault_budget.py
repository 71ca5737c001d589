"""The restart budget counts faults of the job's own work only: preemptions, forced offlines
and lost attempts (control-plane or agent restarts) re-queue a job without using it up."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_platform.adapters.outbound.sim import default_node
from gpu_platform.domain.cluster_state import (
    BindJob,
    ClusterState,
    FinishJob,
    ReportXid,
    RequeueJob,
    SetGpuAdmin,
    SetNodeAdmin,
    StartJob,
    SubmitJob,
)
from gpu_platform.domain.events import JobBound
from gpu_platform.domain.model.gpu import GpuState
from gpu_platform.domain.model.job import Job, JobSpec, JobState
from gpu_platform.domain.model.node import Inventory

N = "node-0"


def start(state: ClusterState, job_id: str, gpu: int, t: float) -> int:
    (bound,) = state.apply(BindJob(job_id, N, (gpu,), t))
    assert isinstance(bound, JobBound)
    state.apply(StartJob(job_id, bound.allocation.epoch, t))
    return bound.allocation.epoch


def settle(state: ClusterState, job_id: str, epoch: int, t: float) -> Job:
    """The stopped attempt's process is reported ended, so its GPU is free again."""
    state.apply(FinishJob(job_id, epoch, None, t))
    return state.job(job_id)


def submitted(inventory: Inventory, attempts: int) -> ClusterState:
    state = ClusterState(inventory)
    spec = JobSpec(("true",), gpus=1, max_attempts=attempts)
    state.apply(SubmitJob("j", spec, 0.0))
    return state


def test_a_preempted_job_with_two_attempts_survives_one_xid_79(inventory: Inventory) -> None:
    state = submitted(inventory, attempts=2)
    epoch = start(state, "j", 0, 1.0)
    state.apply(RequeueJob("j", epoch, 2.0, "preempted: priority (for job k)"))
    settle(state, "j", epoch, 2.0)
    epoch = start(state, "j", 1, 3.0)
    state.apply(ReportXid(N, 1, 79, 4.0))
    job = settle(state, "j", epoch, 4.0)
    assert job.state is JobState.QUEUED
    assert (job.attempt, job.faults, job.interruptions) == (2, 1, 1)


def test_the_second_fault_of_a_two_attempt_job_fails_it_naming_the_budget(
    inventory: Inventory,
) -> None:
    state = submitted(inventory, attempts=2)
    for gpu, t in ((0, 1.0), (1, 3.0)):
        epoch = start(state, "j", gpu, t)
        state.apply(ReportXid(N, gpu, 79, t + 1))
        job = settle(state, "j", epoch, t + 1)
    assert job.state is JobState.FAILED
    assert "no attempts left (2 of 2 ended by faults)" in job.reason


def test_a_forced_offline_requeues_a_one_attempt_job_as_an_interruption(
    inventory: Inventory,
) -> None:
    state = submitted(inventory, attempts=1)
    epoch = start(state, "j", 0, 1.0)
    state.apply(SetGpuAdmin(N, 0, "offline", "swap the board", 2.0, force=True))
    job = settle(state, "j", epoch, 2.0)
    assert job.state is JobState.QUEUED and (job.faults, job.interruptions) == (0, 1)
    epoch = start(state, "j", 1, 3.0)
    state.apply(SetNodeAdmin(N, "offline", "rack maintenance", 4.0, force=True))
    job = settle(state, "j", epoch, 4.0)
    assert job.state is JobState.QUEUED and (job.faults, job.interruptions) == (0, 2)


# One step of a job's life: the running attempt is interrupted (preempted / lost with a
# restart) or hit by a fault (XID 79 on its GPU).
STEPS = st.lists(st.sampled_from(["interrupt", "fault"]), min_size=1, max_size=12)


@settings(max_examples=60, deadline=None)
@given(attempts=st.integers(1, 4), steps=STEPS)
def test_only_faults_use_up_the_budget_whatever_the_interruptions(
    attempts: int, steps: list[str]
) -> None:
    inventory = Inventory((default_node(),), source="sim", simulated=True)
    gpus = [g.index for g in inventory.nodes[0].gpus]
    state = submitted(inventory, attempts)
    faults = interruptions = 0
    for n, step in enumerate(steps):
        t = float(2 * n + 1)
        usable = [g for g in gpus if state.node(N).gpu(g).state is GpuState.AVAILABLE]
        if not usable:
            break
        epoch = start(state, "j", usable[0], t)
        if step == "interrupt":
            state.apply(RequeueJob("j", epoch, t + 1, "control plane restarted"))
            interruptions += 1
        else:
            state.apply(ReportXid(N, usable[0], 79, t + 1))
            faults += 1
        job = settle(state, "j", epoch, t + 1)
        assert (job.faults, job.interruptions) == (faults, interruptions)
        if faults == attempts:
            assert job.state is JobState.FAILED
            break
        assert job.state is JobState.QUEUED
