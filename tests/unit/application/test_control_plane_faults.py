"""The control plane under faults and operator actions, with in-memory fakes and the simulated
hardware as injector and GPU reset."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gpu_platform.adapters.outbound.sim import SimulatedHardware
from gpu_platform.application.control_plane import ControlPlane
from gpu_platform.domain.errors import Conflict, InvalidRequest, NotFound
from gpu_platform.domain.faults.health import Heartbeat, XidReport
from gpu_platform.domain.faults.policy import FaultPolicy
from gpu_platform.domain.model.gpu import GpuState
from gpu_platform.domain.model.job import JobSpec, JobState
from gpu_platform.domain.model.node import Inventory, NodeState
from gpu_platform.ports.outbound.gpu_reset import GpuReset
from gpu_platform.testing.fakes import (
    FakeJobRunner,
    InMemoryHardwareStore,
    InMemoryJobStore,
    ManualClock,
    RecordingPublisher,
    SequentialJobIds,
)

N = "node-0"


class Rig:
    def __init__(
        self,
        inventory: Inventory,
        *,
        hardware: InMemoryHardwareStore | None = None,
        store: InMemoryJobStore | None = None,
        reset: GpuReset | str | None = "sim",
        inject: bool = True,
        policy: FaultPolicy = FaultPolicy(),
    ) -> None:
        self.sim = SimulatedHardware(inventory, heartbeats=False)
        self.store = store or InMemoryJobStore()
        self.hardware = hardware or InMemoryHardwareStore()
        self.runner = FakeJobRunner()
        self.clock = ManualClock()
        self.plane = ControlPlane(
            inventory,
            self.store,
            self.runner,
            self.clock,
            SequentialJobIds(),
            RecordingPublisher(),
            hardware=self.hardware,
            gpu_reset=self.sim if reset == "sim" else reset,  # type: ignore[arg-type]
            injector=self.sim if inject else None,
            fault_policy=policy,
        )
        self.sim.start(self.plane.report_health)

    def close(self) -> None:
        self.sim.stop()

    def run(self, gpus: int, attempts: int = 3) -> str:
        spec = JobSpec(("fake-forever",), gpus=gpus, max_attempts=attempts)
        job_id = self.plane.submit(spec).id
        self.plane.schedule_once()
        assert self.plane.get(job_id).state is JobState.RUNNING
        return job_id

    def gpu(self, index: int) -> tuple[GpuState, str]:
        info = next(g for g in self.plane.gpus() if g.gpu.index == index)
        return info.state, info.reason


@pytest.fixture
def rig(inventory: Inventory) -> Iterator[Rig]:
    r = Rig(inventory)
    yield r
    r.close()


def test_xid_79_on_a_busy_gpu_takes_it_offline_and_the_job_runs_again_on_another_gpu(
    rig: Rig,
) -> None:
    job_id = rig.run(1)
    first = rig.plane.get(job_id).allocation
    assert first is not None
    (gpu,) = first.gpu_indices
    assert rig.plane.inject(f"xid 79 on gpu {gpu}", actor="test") == [
        f"xid 79 on gpu {gpu} node {N}"
    ]
    job = rig.plane.get(job_id)
    assert (job.state, job.releasing) == (JobState.QUEUED, True)
    assert rig.gpu(gpu) == (GpuState.OFFLINE, "xid 79 (reboot)")
    rig.runner.deliver()  # the old process ends (SIGTERM)
    rig.plane.schedule_once()
    job = rig.plane.get(job_id)
    assert job.state is JobState.RUNNING and job.attempt == 2
    assert job.allocation is not None and gpu not in job.allocation.gpu_indices
    assert job.allocation.epoch > first.epoch
    assert [s.epoch for s in rig.runner.live()] == [job.allocation.epoch]
    rig.plane.check_invariants()


def test_a_reset_class_xid_resets_the_gpu_once_its_job_has_stopped(rig: Rig) -> None:
    job_id = rig.run(8)
    rig.plane.report_health(XidReport(N, 2, 48))
    assert rig.gpu(2)[0] is GpuState.RESETTING
    rig.runner.deliver()
    assert rig.gpu(2) == (GpuState.AVAILABLE, "reset passed")
    rig.plane.schedule_once()
    assert rig.plane.get(job_id).state is JobState.RUNNING


def test_a_failed_reset_takes_the_gpu_offline_with_the_controllers_reason(rig: Rig) -> None:
    rig.plane.inject("reset-fail on gpu 1; xid 95 on gpu 1", actor="test")
    assert rig.gpu(1) == (GpuState.OFFLINE, "reset failed: simulated reset failure")


def test_without_a_reset_controller_a_gpu_needing_a_reset_goes_offline(
    inventory: Inventory,
) -> None:
    rig = Rig(inventory, reset=None)
    rig.plane.report_health(XidReport(N, 1, 48))
    state, reason = rig.gpu(1)
    assert state is GpuState.OFFLINE and "no GPU reset controller" in reason
    rig.close()


def test_a_job_out_of_attempts_fails_with_the_fault_as_its_reason(rig: Rig) -> None:
    job_id = rig.run(1, attempts=1)
    rig.plane.inject("lost gpu 0", actor="test")
    rig.runner.deliver()
    job = rig.plane.get(job_id)
    assert job.state is JobState.FAILED
    assert "fallen off the bus" in job.reason and "no attempts left" in job.reason


def test_operator_actions_are_audited_with_who_and_why_including_refusals(rig: Rig) -> None:
    job_id = rig.run(1)
    with pytest.raises(Conflict, match="runs job"):
        rig.plane.gpu_action(N, 0, "offline", reason="fan noise", actor="alice")
    rig.plane.gpu_action(N, 0, "offline", reason="fan noise", actor="alice", force=True)
    assert rig.plane.get(job_id).state is JobState.QUEUED
    rig.plane.node_action(N, "drain", reason="kernel update", actor="bob")
    audit = rig.plane.audit()
    assert [(a.actor, a.action, a.target, a.reason) for a in audit] == [
        ("alice", "offline", f"gpu {N}:0", "fan noise"),
        ("alice", "offline --force", f"gpu {N}:0", "fan noise"),
        ("bob", "drain", f"node {N}", "kernel update"),
    ]
    assert audit[0].outcome.startswith("refused") and audit[1].outcome == "ok"
    assert rig.gpu(0) == (GpuState.OFFLINE, "offline --force by alice: fan noise")
    assert rig.plane.nodes()[0].state is NodeState.DRAINING


def test_an_action_the_table_forbids_is_a_conflict_and_unknown_gpus_are_not_found(
    rig: Rig,
) -> None:
    rig.plane.report_health(XidReport(N, 3, 79))
    rig.plane.node_action(N, "offline", reason="", actor="ops")
    with pytest.raises(Conflict, match="illegal"):
        rig.plane.node_action(N, "drain", reason="", actor="ops")
    with pytest.raises(NotFound):
        rig.plane.gpu_action(N, 99, "drain", reason="", actor="ops")


def test_drained_and_offline_gpus_stay_so_across_a_restart(inventory: Inventory) -> None:
    rig = Rig(inventory)
    rig.plane.gpu_action(N, 1, "drain", reason="maintenance", actor="ops")
    rig.plane.inject("xid 79 on gpu 2", actor="ops")
    rig.close()
    again = Rig(inventory, hardware=rig.hardware, store=rig.store)
    again.plane.recover()
    assert again.gpu(1)[0] is GpuState.DRAINING
    assert again.gpu(2)[0] is GpuState.OFFLINE
    job_id = again.run(6)
    alloc = again.plane.get(job_id).allocation
    assert alloc is not None and {1, 2}.isdisjoint(alloc.gpu_indices)
    assert len(again.plane.audit()) == 2
    again.close()


def test_injection_can_be_disabled_and_a_bad_script_is_refused_and_audited(
    inventory: Inventory,
) -> None:
    rig = Rig(inventory, inject=False)
    with pytest.raises(InvalidRequest, match="disabled"):
        rig.plane.inject("xid 79 on gpu 0", actor="mallory")
    rig.close()
    rig = Rig(inventory)
    with pytest.raises(InvalidRequest, match="no GPU 42"):
        rig.plane.inject("xid 79 on gpu 42", actor="ops")
    with pytest.raises(InvalidRequest, match="cannot parse"):
        rig.plane.inject("xid seventy-nine", actor="ops")
    assert [a.outcome.split(":")[0] for a in rig.plane.audit()] == ["refused", "refused"]
    assert rig.gpu(0)[0] is GpuState.AVAILABLE
    rig.close()


def test_a_silent_node_goes_down_and_its_jobs_are_requeued(inventory: Inventory) -> None:
    rig = Rig(inventory, policy=FaultPolicy(node_suspect_after_s=5, node_down_after_s=20))
    rig.plane.report_health(Heartbeat(N))
    job_id = rig.run(2)
    rig.clock.advance(6)
    rig.plane.check_nodes()
    assert rig.plane.nodes()[0].state is NodeState.SUSPECT
    rig.clock.advance(15)
    rig.plane.check_nodes()
    assert rig.plane.nodes()[0].state is NodeState.DOWN
    assert rig.plane.get(job_id).state is JobState.QUEUED
    rig.runner.deliver()
    assert rig.plane.schedule_once() == 0  # nowhere to run
    rig.plane.node_action(N, "online", reason="back", actor="ops")
    assert rig.plane.schedule_once() == 1
    rig.close()


def test_a_finding_about_an_unknown_gpu_is_dropped_not_raised(rig: Rig) -> None:
    rig.plane.report_health(XidReport("no-such-node", 0, 79))
    rig.plane.report_health(XidReport(N, 77, 79))
    assert all(g.state is GpuState.AVAILABLE for g in rig.plane.gpus())


def test_a_hot_gpu_is_skipped_by_the_scheduler_until_it_cools(rig: Rig) -> None:
    rig.plane.inject("temp 95 on gpu 0", actor="ops")
    job_id = rig.run(1)
    alloc = rig.plane.get(job_id).allocation
    assert alloc is not None and alloc.gpu_indices == (1,)
    assert next(g for g in rig.plane.gpus() if g.gpu.index == 0).hot
    rig.plane.inject("temp 70 on gpu 0", actor="ops")
    assert not next(g for g in rig.plane.gpus() if g.gpu.index == 0).hot
