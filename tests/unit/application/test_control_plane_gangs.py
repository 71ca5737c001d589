"""Gang jobs in the control plane: bound whole, one launch per task with torchrun's variables,
a failing task stops the whole gang, GPUs held until the last task is gone."""

from __future__ import annotations

import pytest

from gpu_platform.adapters.outbound.sim import default_node
from gpu_platform.adapters.outbound.storage.codec import job_from_dict, job_to_dict
from gpu_platform.application.control_plane import ControlPlane
from gpu_platform.domain.errors import InvalidRequest
from gpu_platform.domain.model.job import JobSpec, JobState
from gpu_platform.domain.model.node import Inventory
from gpu_platform.testing.fakes import (
    FakeJobRunner,
    InMemoryJobStore,
    ManualClock,
    RecordingPublisher,
    SequentialJobIds,
)


@pytest.fixture
def plane_runner() -> tuple[ControlPlane, FakeJobRunner, InMemoryJobStore]:
    nodes = (default_node("node-a"), default_node("node-b"))
    inventory = Inventory(nodes, source="sim", simulated=True)
    runner, store = FakeJobRunner(), InMemoryJobStore()
    plane = ControlPlane(
        inventory, store, runner, ManualClock(), SequentialJobIds(), RecordingPublisher()
    )
    return plane, runner, store


def free_gpus(plane: ControlPlane) -> int:
    return plane.status().gpus_free


def test_a_gang_is_bound_whole_across_nodes_and_each_task_learns_its_rank(
    plane_runner: tuple[ControlPlane, FakeJobRunner, InMemoryJobStore],
) -> None:
    plane, runner, store = plane_runner
    job = plane.submit(JobSpec(("fake-forever",), gpus=8, tasks=2))
    assert plane.schedule_once() == 1
    job = plane.get(job.id)
    assert job.state is JobState.RUNNING
    assert job.allocation is not None
    assert sorted(t.node for t in job.allocation.tasks) == ["node-a", "node-b"]
    assert len(set(job.allocation.all_gpu_uuids)) == 16
    assert free_gpus(plane) == 0
    specs = sorted(runner.started, key=lambda s: s.rank)
    assert [s.rank for s in specs] == [0, 1]
    for spec in specs:
        assert spec.gang is not None
        assert spec.gang.world_size == 2
        assert spec.gang.local_rank == 0 and spec.gang.local_world_size == 1
        assert spec.gang.node_rank == spec.rank
        assert spec.gang.master_addr == "127.0.0.1"
        assert len(spec.gpu_indices) == 8
    # The stored record keeps every task (a restart must free all of them).
    assert job_from_dict(job_to_dict(job)) == job
    assert store.load()[0].allocation == job.allocation


def test_two_tasks_share_a_node_when_it_fits_and_get_local_ranks(
    plane_runner: tuple[ControlPlane, FakeJobRunner, InMemoryJobStore],
) -> None:
    plane, runner, _ = plane_runner
    plane.submit(JobSpec(("fake-forever",), gpus=2, tasks=4))
    plane.schedule_once()
    specs = sorted(runner.started, key=lambda s: s.rank)
    assert len(specs) == 4
    by_node: dict[int, list[int]] = {}
    for spec in specs:
        assert spec.gang is not None
        by_node.setdefault(spec.gang.node_rank, []).append(spec.gang.local_rank)
        assert spec.gang.local_world_size == len(
            [s for s in specs if s.gang and s.gang.node_rank == spec.gang.node_rank]
        )
    assert all(sorted(v) == list(range(len(v))) for v in by_node.values())


def test_a_gang_that_does_not_fit_waits_whole_and_holds_nothing(
    plane_runner: tuple[ControlPlane, FakeJobRunner, InMemoryJobStore],
) -> None:
    plane, runner, _ = plane_runner
    blocker = plane.submit(JobSpec(("fake-forever",), gpus=4))
    plane.schedule_once()
    gang = plane.submit(JobSpec(("fake-forever",), gpus=8, tasks=2))
    assert plane.schedule_once() == 0
    assert plane.get(gang.id).state is JobState.QUEUED
    assert [s.job_id for s in runner.started] == [blocker.id]
    assert free_gpus(plane) == 12


def test_a_gang_larger_than_the_cluster_is_refused_naming_tasks(
    plane_runner: tuple[ControlPlane, FakeJobRunner, InMemoryJobStore],
) -> None:
    plane, _, _ = plane_runner
    with pytest.raises(InvalidRequest) as err:
        plane.submit(JobSpec(("fake-forever",), gpus=8, tasks=3))
    assert err.value.field == "tasks"


def test_one_failing_task_stops_the_gang_and_gpus_stay_held_until_the_last_exits(
    plane_runner: tuple[ControlPlane, FakeJobRunner, InMemoryJobStore],
) -> None:
    plane, runner, _ = plane_runner
    job = plane.submit(JobSpec(("fake-forever",), gpus=4, tasks=3))
    plane.schedule_once()
    runner.finish(job.id, 7, rank=1)
    runner.deliver()  # rank 1 reported: the others are asked to stop, nothing released yet
    assert plane.get(job.id).state is JobState.RUNNING
    assert free_gpus(plane) == 4
    assert sorted(s.rank for s in runner.live()) == [0, 2]
    runner.deliver()  # the stop lands: ranks 0 and 2 end with SIGTERM
    final = plane.get(job.id)
    assert final.state is JobState.FAILED
    assert final.exit_code == 7
    assert final.reason == "task 1 exited 7; the gang was stopped whole"
    assert free_gpus(plane) == 16
    assert runner.live() == []


def test_a_gang_completes_when_every_task_exits_zero(
    plane_runner: tuple[ControlPlane, FakeJobRunner, InMemoryJobStore],
) -> None:
    plane, runner, _ = plane_runner
    job = plane.submit(JobSpec(("fake-forever",), gpus=1, tasks=3))
    plane.schedule_once()
    runner.finish(job.id, 0, rank=0)
    runner.deliver()
    assert plane.get(job.id).state is JobState.RUNNING  # ranks 1 and 2 still run
    runner.finish(job.id, 0)
    runner.deliver()
    assert plane.get(job.id).state is JobState.COMPLETED
    assert free_gpus(plane) == 16


def test_cancelling_a_gang_stops_every_task(
    plane_runner: tuple[ControlPlane, FakeJobRunner, InMemoryJobStore],
) -> None:
    plane, runner, _ = plane_runner
    job = plane.submit(JobSpec(("fake-forever",), gpus=2, tasks=2))
    plane.schedule_once()
    plane.cancel(job.id)
    assert free_gpus(plane) == 12  # held while the tasks are being stopped
    runner.deliver()
    assert plane.get(job.id).state is JobState.CANCELLED
    assert free_gpus(plane) == 16
    assert runner.live() == []


def test_logs_name_a_task_by_rank_and_refuse_a_rank_the_job_does_not_have(
    plane_runner: tuple[ControlPlane, FakeJobRunner, InMemoryJobStore],
) -> None:
    plane, runner, _ = plane_runner
    job = plane.submit(JobSpec(("fake-exit", "0", "hi"), gpus=1, tasks=2))
    plane.schedule_once()
    runner.deliver()
    assert plane.get(job.id).state is JobState.COMPLETED
    assert plane.logs(job.id, rank=1) == "hi\n"
    with pytest.raises(InvalidRequest) as err:
        plane.logs(job.id, rank=2)
    assert err.value.field == "rank"


def test_a_launch_failure_in_the_middle_of_a_gang_stops_the_started_tasks(
    plane_runner: tuple[ControlPlane, FakeJobRunner, InMemoryJobStore],
) -> None:
    plane, runner, _ = plane_runner
    original = runner.start
    calls = []

    def flaky(spec, on_exit):  # type: ignore[no-untyped-def]
        calls.append(spec.rank)
        if spec.rank == 1:
            from gpu_platform.ports.outbound.job_runner import LaunchError

            raise LaunchError("node-b is out of file descriptors")
        original(spec, on_exit)

    runner.start = flaky  # type: ignore[method-assign]
    job = plane.submit(JobSpec(("fake-forever",), gpus=1, tasks=3))
    plane.schedule_once()
    assert calls == [0, 1]  # rank 2 is never started
    # the bind recorded the start too (one command); rank 0 is still being stopped
    assert plane.get(job.id).state is JobState.RUNNING
    runner.deliver()
    final = plane.get(job.id)
    assert final.state is JobState.FAILED
    assert final.reason == "launch failed: node-b is out of file descriptors"
    assert free_gpus(plane) == 16
