"""The control plane with in-memory fakes: scheduling, launching, exits, cancel, restart."""

from __future__ import annotations

import pytest

from gpu_platform.application.control_plane import ControlPlane, ShutdownPolicy
from gpu_platform.domain.errors import Conflict, InvalidRequest, NotFound
from gpu_platform.domain.events import AttemptEnded, JobFinished, StaleReportIgnored
from gpu_platform.domain.model.gpu import GpuState
from gpu_platform.domain.model.job import JobSpec, JobState
from gpu_platform.domain.model.node import Inventory
from gpu_platform.ports.outbound.job_runner import ExitReport
from gpu_platform.testing.fakes import (
    FakeJobRunner,
    InMemoryJobStore,
    ManualClock,
    RecordingPublisher,
    SequentialJobIds,
)


class Rig:
    def __init__(
        self, inventory: Inventory, store: InMemoryJobStore | None = None, **kw: object
    ) -> None:
        self.inventory = inventory
        self.store = store or InMemoryJobStore()
        self.runner = FakeJobRunner()
        self.clock = ManualClock()
        self.events = RecordingPublisher()
        self.ids = SequentialJobIds()
        self.plane = ControlPlane(
            inventory,
            self.store,
            self.runner,
            self.clock,
            self.ids,
            self.events,
            **kw,  # type: ignore[arg-type]
        )

    def submit(self, gpus: int, *argv: str) -> str:
        return self.plane.submit(JobSpec(argv or ("fake-forever",), gpus=gpus)).id

    def state(self, job_id: str) -> JobState:
        return self.plane.get(job_id).state


@pytest.fixture
def rig(inventory: Inventory) -> Rig:
    return Rig(inventory)


def test_a_job_runs_on_the_gpus_it_was_given_and_completes(rig: Rig) -> None:
    job_id = rig.submit(2, "fake-exit", "0", "hello")
    assert rig.plane.schedule_once() == 1
    (launched,) = rig.runner.started
    job = rig.plane.get(job_id)
    assert job.state is JobState.RUNNING
    assert job.allocation is not None
    assert launched.gpu_indices == job.allocation.gpu_indices == (0, 1)
    rig.runner.deliver()
    job = rig.plane.get(job_id)
    assert (job.state, job.exit_code) == (JobState.COMPLETED, 0)
    assert rig.plane.logs(job_id) == "hello\n"
    assert rig.store.get(job_id) == job


def test_a_failing_job_ends_failed_with_its_exit_code(rig: Rig) -> None:
    job_id = rig.submit(1, "fake-exit", "3")
    rig.plane.schedule_once()
    rig.runner.deliver()
    job = rig.plane.get(job_id)
    assert (job.state, job.exit_code, job.reason) == (JobState.FAILED, 3, "exited 3")


def test_a_program_that_cannot_start_fails_the_job_and_frees_its_gpus(rig: Rig) -> None:
    job_id = rig.submit(8, "no-such-program")
    rig.plane.schedule_once()
    job = rig.plane.get(job_id)
    assert job.state is JobState.FAILED
    assert "launch failed" in job.reason
    assert rig.plane.status().gpus_free == 8


def test_jobs_wait_in_fifo_order_and_start_when_gpus_free_up(rig: Rig) -> None:
    big = rig.submit(6)
    blocked = rig.submit(4)
    small = rig.submit(1)
    assert rig.plane.schedule_once() == 1
    assert rig.state(blocked) is JobState.QUEUED
    assert rig.state(small) is JobState.QUEUED  # no skipping the head: big jobs never starve
    rig.plane.cancel(big)
    rig.runner.deliver()
    assert rig.plane.schedule_once() == 2
    assert rig.state(blocked) is JobState.RUNNING
    assert rig.state(small) is JobState.RUNNING


def test_cancel_stops_a_running_job_and_frees_its_gpus_only_once_it_has_ended(rig: Rig) -> None:
    job_id = rig.submit(8)
    waiting = rig.submit(1)
    rig.plane.schedule_once()
    assert rig.plane.cancel(job_id).state is JobState.CANCELLED
    assert rig.plane.status().gpus_free == 0  # SIGTERM sent; the process may still use them
    assert rig.plane.schedule_once() == 0
    assert rig.runner.deliver() == 1  # the process ended
    assert isinstance(rig.events.events[-1], AttemptEnded)
    assert rig.state(job_id) is JobState.CANCELLED
    assert rig.plane.status().gpus_free == 8
    assert rig.plane.schedule_once() == 1
    assert rig.state(waiting) is JobState.RUNNING


def test_a_late_report_from_a_superseded_attempt_is_ignored(rig: Rig) -> None:
    job_id = rig.submit(1, "fake-exit", "0")
    rig.plane.schedule_once()
    rig.runner.deliver()
    epoch = rig.plane.get(job_id).allocation.epoch  # type: ignore[union-attr]
    rig.plane._on_exit(ExitReport(job_id, epoch, 0))
    assert isinstance(rig.events.events[-1], StaleReportIgnored)
    assert rig.state(job_id) is JobState.COMPLETED


def test_cancel_of_an_ended_job_is_a_conflict_and_of_an_unknown_one_not_found(rig: Rig) -> None:
    job_id = rig.submit(0, "fake-exit", "0")
    rig.plane.schedule_once()
    rig.runner.deliver()
    with pytest.raises(Conflict):
        rig.plane.cancel(job_id)
    with pytest.raises(NotFound):
        rig.plane.cancel("j-unknown")


def test_a_request_larger_than_any_node_is_rejected_at_submit(rig: Rig) -> None:
    with pytest.raises(InvalidRequest) as err:
        rig.submit(9)
    assert err.value.field == "gpus"
    assert rig.plane.list_jobs() == []


def test_listing_filters_by_state_and_rejects_unknown_states(rig: Rig) -> None:
    running = rig.submit(8)
    queued = rig.submit(1)
    rig.plane.schedule_once()
    assert [j.id for j in rig.plane.list_jobs("running")] == [running]
    assert [j.id for j in rig.plane.list_jobs("QUEUED")] == [queued]
    with pytest.raises(InvalidRequest):
        rig.plane.list_jobs("sleeping")


def test_gpus_and_status_show_who_holds_what(rig: Rig) -> None:
    job_id = rig.submit(3)
    rig.plane.schedule_once()
    held = [g for g in rig.plane.gpus() if g.job_id == job_id]
    assert [g.gpu.index for g in held] == [0, 1, 2]
    assert all(g.state is GpuState.IN_USE for g in held)
    status = rig.plane.status()
    assert (status.gpus_total, status.gpus_free, status.simulated) == (8, 5, True)
    assert status.jobs_by_state == {"RUNNING": 1}


def test_logs_of_an_attempt_that_never_ran_are_not_found(rig: Rig) -> None:
    job_id = rig.submit(0, "fake-exit", "0")
    assert rig.plane.logs(job_id) == ""
    with pytest.raises(NotFound):
        rig.plane.logs(job_id, attempt=1)


@pytest.mark.parametrize(
    ("policy", "after"), [("requeue", JobState.QUEUED), ("fail", JobState.FAILED)]
)
def test_shutdown_applies_its_policy_to_running_jobs(
    inventory: Inventory, policy: ShutdownPolicy, after: JobState
) -> None:
    rig = Rig(inventory, shutdown_policy=policy)
    running = rig.submit(2)
    done = rig.submit(1, "fake-exit", "0")
    rig.plane.schedule_once()
    rig.runner.deliver()
    rig.plane.shutdown()
    assert rig.runner.live() == []
    assert rig.store.get(running).state is after  # type: ignore[union-attr]
    assert rig.store.get(done).state is JobState.COMPLETED  # type: ignore[union-attr]
    assert not any(
        isinstance(e, JobFinished) and e.job_id == running and after is JobState.QUEUED
        for e in rig.events.events
    )


def test_a_restart_requeues_lost_attempts_reaps_leftovers_and_runs_them_again(
    inventory: Inventory,
) -> None:
    first = Rig(inventory)
    lost = first.submit(2)
    done = first.submit(1, "fake-exit", "0")
    first.plane.schedule_once()
    first.runner.deliver()
    epoch = first.plane.get(lost).allocation.epoch  # type: ignore[union-attr]
    # The process died with the old control plane; one child survived.
    second = Rig(inventory, store=first.store)
    second.runner.orphans.add((lost, epoch))
    assert second.plane.recover() == [lost]
    assert second.runner.orphans == set()
    job = second.plane.get(lost)
    assert job.state is JobState.QUEUED
    assert "restarted" in job.reason and "1 leftover" in job.reason
    assert second.plane.get(done).state is JobState.COMPLETED
    second.plane.schedule_once()
    again = second.plane.get(lost)
    assert (again.state, again.attempt) == (JobState.RUNNING, 2)
    assert again.allocation is not None and again.allocation.epoch > epoch


def test_the_scheduler_thread_launches_without_being_asked(inventory: Inventory) -> None:
    rig = Rig(inventory, schedule_interval_s=0.01)
    rig.plane.start()
    try:
        job_id = rig.submit(1)
        for _ in range(500):
            if rig.state(job_id) is JobState.RUNNING:
                break
            import time

            time.sleep(0.01)
        assert rig.state(job_id) is JobState.RUNNING
    finally:
        rig.plane.shutdown()
    assert rig.state(job_id) is JobState.QUEUED


def test_with_pinning_a_job_is_bound_to_the_cpus_and_memory_of_its_gpus_numa_node(
    inventory: Inventory,
) -> None:
    rig = Rig(inventory, pin_cpus=True)
    rig.submit(2)
    rig.submit(1, "fake-forever")
    rig.plane.schedule_once()
    first, _second = rig.runner.started
    assert first.mems == (0,) and first.cpus == tuple(range(64))
    assert first.vendor == "nvidia"


def test_without_pinning_no_cpu_set_is_asked_for(rig: Rig) -> None:
    rig.submit(2)
    rig.plane.schedule_once()
    (launched,) = rig.runner.started
    assert (launched.cpus, launched.mems) == ((), ())


def test_limits_of_the_request_reach_the_runner(rig: Rig) -> None:
    rig.plane.submit(JobSpec(("fake-forever",), gpus=1, memory_bytes=1 << 30, time_limit_s=60))
    rig.plane.schedule_once()
    (launched,) = rig.runner.started
    assert (launched.memory_bytes, launched.time_limit_s) == (1 << 30, 60)


def test_a_job_is_told_the_rdma_nics_nearest_its_gpus() -> None:
    from gpu_platform.adapters.outbound.sim.profiles import ProfileGpuDiscovery

    inventory = ProfileGpuDiscovery("dgx-a100").discover()
    rig = Rig(inventory)
    rig.submit(2)
    rig.plane.schedule_once()
    (launched,) = rig.runner.started
    node = inventory.nodes[0]
    assert node.topology is not None
    rdma = {n.name for n in node.topology.nics if n.kind == "rdma"}
    assert launched.nics and set(launched.nics) <= rdma
    assert len(launched.nics) == len(set(launched.nics))


def test_a_node_without_topology_gives_no_nic_hint(rig: Rig) -> None:
    rig.submit(2)
    rig.plane.schedule_once()
    assert rig.runner.started[0].nics == ()


def test_log_from_reads_an_attempt_and_says_whether_it_may_still_write(rig: Rig) -> None:
    job_id = rig.submit(1, "fake-exit", "0", "hello")
    rig.plane.schedule_once()
    assert rig.plane.log_from(job_id, 1, 0) == (b"", True)
    rig.runner.deliver()
    assert rig.plane.log_from(job_id, 1, 0) == (b"hello\n", False)
    assert rig.plane.log_from(job_id, 1, 2, 2) == (b"ll", False)
    with pytest.raises(NotFound):
        rig.plane.log_from(job_id, 2, 0)
