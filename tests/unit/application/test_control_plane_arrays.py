"""Job arrays through the control plane with in-memory fakes: every task launches with its
index in its environment, the throttle holds tasks back and says why, cancel takes one task
or all, tasks are stored, and the tenant and admission wrappers apply per task."""

from __future__ import annotations

import pytest

from gpu_platform.application.admission import AdmissionControl, AdmissionLimits, InputLimits
from gpu_platform.application.auth_scope import AuditTrail, TenantScope
from gpu_platform.application.control_plane import ControlPlane
from gpu_platform.domain.errors import InvalidRequest, NotFound
from gpu_platform.domain.model.job import JobSpec, JobState
from gpu_platform.domain.model.node import Inventory
from gpu_platform.domain.model.tenancy import Forbidden, Principal, Role, TooManyRequests
from gpu_platform.domain.scheduling.model import PendingCode
from gpu_platform.testing.fakes import (
    FakeJobRunner,
    InMemoryJobStore,
    ManualClock,
    RecordingPublisher,
    SequentialJobIds,
)


class Rig:
    def __init__(self, inventory: Inventory) -> None:
        self.store = InMemoryJobStore()
        self.runner = FakeJobRunner()
        self.plane = ControlPlane(
            inventory,
            self.store,
            self.runner,
            ManualClock(),
            SequentialJobIds(),
            RecordingPublisher(),
        )


@pytest.fixture
def rig(inventory: Inventory) -> Rig:
    return Rig(inventory)


SPEC = JobSpec(("fake-forever",), gpus=1, tenant="team-a")


def test_every_task_launches_with_its_index_in_our_and_slurms_variables(rig: Rig) -> None:
    made = rig.plane.submit_array(SPEC, "3-9:3")
    assert (made.array.indices, made.states) == ((3, 6, 9), {"QUEUED": 3})
    assert rig.plane.schedule_once() == 3
    envs = {s.job_id: dict(s.env) for s in rig.runner.started}
    assert sorted(envs) == [f"{made.id}_3", f"{made.id}_6", f"{made.id}_9"]
    six = envs[f"{made.id}_6"]
    assert six["ARRAY_TASK_ID"] == six["SLURM_ARRAY_TASK_ID"] == "6"
    assert six["ARRAY_JOB_ID"] == six["SLURM_ARRAY_JOB_ID"] == made.id
    assert (six["SLURM_ARRAY_TASK_COUNT"], six["SLURM_ARRAY_TASK_MIN"]) == ("3", "3")
    assert six["SLURM_ARRAY_TASK_MAX"] == "9"
    assert all(rig.store.get(f"{made.id}_{i}") is not None for i in (3, 6, 9))


def test_the_throttle_holds_tasks_back_and_why_says_so(rig: Rig) -> None:
    made = rig.plane.submit_array(SPEC, "0-9%3")
    assert rig.plane.schedule_once() == 3  # 8 GPUs free, but %3
    waiting = rig.plane.get(f"{made.id}_5")
    assert waiting.state is JobState.QUEUED
    why = rig.plane.why(waiting.id)
    assert why is not None and why.code is PendingCode.ARRAY_THROTTLE
    assert "at most 3 tasks at once" in why.message
    assert rig.plane.get_array(made.id).waiting == "3-9%3"
    rig.runner.finish(f"{made.id}_0", 0)
    rig.runner.deliver()
    assert rig.plane.schedule_once() == 1  # one ended: one more may start
    running = [t for t in rig.plane.list_jobs("RUNNING") if t.array is not None]
    assert len(running) == 3


def test_cancel_one_task_or_the_whole_array(rig: Rig) -> None:
    made = rig.plane.submit_array(SPEC, "0-4")
    rig.plane.schedule_once()
    rig.plane.cancel(f"{made.id}_2")
    assert rig.plane.get(f"{made.id}_2").state is JobState.CANCELLED
    after = rig.plane.cancel_array(made.id)
    assert after.states == {"CANCELLED": 5}
    assert all(rig.store.get(f"{made.id}_{i}").state is JobState.CANCELLED for i in range(5))  # type: ignore[union-attr]
    with pytest.raises(NotFound):
        rig.plane.get_array("j-nope")


def test_an_array_is_refused_whole_when_its_spec_could_never_run(rig: Rig) -> None:
    with pytest.raises(InvalidRequest) as caught:
        rig.plane.submit_array(JobSpec(("true",), gpus=9), "0-3")
    assert caught.value.field == "gpus"
    assert rig.plane.list_jobs() == []


def test_tenants_and_admission_limits_apply_to_every_task(rig: Rig) -> None:
    admitted = AdmissionControl(
        rig.plane, AdmissionLimits(max_queued_jobs=10), InputLimits(max_array_size=100)
    )
    user = TenantScope(admitted, Principal("u", "team-a", Role.USER), AuditTrail())
    with pytest.raises(InvalidRequest, match="above the largest allowed"):
        user.submit_array(SPEC, "0-100")
    with pytest.raises(TooManyRequests):
        user.submit_array(SPEC, "0-10")  # 11 waiting > 10
    made = user.submit_array(SPEC, "0-9")
    other = TenantScope(admitted, Principal("v", "team-b", Role.USER), AuditTrail())
    with pytest.raises(NotFound):
        other.get_array(made.id)
    with pytest.raises(NotFound):
        other.cancel_array(made.id)
    with pytest.raises(Forbidden):
        other.submit_array(SPEC, "0-1")  # SPEC names team-a


def test_each_task_of_an_array_of_gangs_starts_whole(rig: Rig) -> None:
    made = rig.plane.submit_array(JobSpec(("fake-forever",), gpus=2, tasks=2), "0-1")
    assert rig.plane.schedule_once() == 2
    ranks = sorted((s.job_id, s.rank, dict(s.env)["ARRAY_TASK_ID"]) for s in rig.runner.started)
    assert ranks == [
        (f"{made.id}_0", 0, "0"),
        (f"{made.id}_0", 1, "0"),
        (f"{made.id}_1", 0, "1"),
        (f"{made.id}_1", 1, "1"),
    ]
