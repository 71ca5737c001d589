"""The service manager over a real control plane with in-memory fakes: user calls become
replicated commands, the controller submits replica jobs, and replica jobs no service knows
(an embedded core restarted: its jobs persist, its services do not) are stopped."""

from __future__ import annotations

from gpu_platform.adapters.outbound.sim import default_node
from gpu_platform.application.control_plane import ControlPlane
from gpu_platform.application.services import ServiceManager
from gpu_platform.domain.model.job import JobSpec, JobState
from gpu_platform.domain.model.node import Inventory
from gpu_platform.domain.scheduling.model import QueueOrder, Quota, SchedulerPolicy
from gpu_platform.domain.services.model import ServiceSpec
from gpu_platform.domain.services.reconcile import ENV_SERVICE
from gpu_platform.testing.fakes import (
    FakeJobRunner,
    InMemoryJobStore,
    ManualClock,
    RecordingPublisher,
    SequentialJobIds,
)


def plane(store: InMemoryJobStore, clock: ManualClock) -> ControlPlane:
    inventory = Inventory((default_node(),), source="test", simulated=True)
    runner = FakeJobRunner()
    return ControlPlane(inventory, store, runner, clock, SequentialJobIds(), RecordingPublisher())


def test_a_new_service_gets_one_job_per_replica_carrying_the_probe_settings() -> None:
    clock = ManualClock()
    core = plane(InMemoryJobStore(), clock)
    manager = ServiceManager(core, clock)
    manager.create_service(ServiceSpec("web", ("srv", "--port", "${PORT}"), replicas=2, gpus=1))
    manager.run_once()
    info = manager.get_service("web")
    assert [r.replica_id for r in info.replicas] == ["web-1", "web-2"]
    jobs = [core.get(r.job_id) for r in info.replicas]
    assert all(j.spec.gpus == 1 and j.state is JobState.QUEUED for j in jobs)
    assert all(dict(j.spec.env)[ENV_SERVICE] == "web" for j in jobs)
    assert {j.spec.name for j in jobs} == {"web/web-1", "web/web-2"}
    manager.run_once()  # nothing more to do: no duplicate jobs
    assert len(core.list_jobs()) == 2


def test_replica_jobs_of_no_service_are_stopped_when_the_core_starts_acting() -> None:
    clock = ManualClock()
    store = InMemoryJobStore()
    first = plane(store, clock)
    ghost = first.submit(JobSpec(("srv",), env=((ENV_SERVICE, "gone"),))).id
    plain = first.submit(JobSpec(("train",))).id
    again = plane(store, clock)  # restarted: the jobs were stored, the services were not
    ServiceManager(again, clock).run_once()
    assert again.get(ghost).state is JobState.CANCELLED
    assert "no service" in again.get(ghost).reason
    assert again.get(plain).state is JobState.QUEUED


def test_replicas_count_against_the_tenants_quota_and_describe_says_why_one_waits() -> None:
    clock = ManualClock()
    inventory = Inventory((default_node(),), source="test", simulated=True)
    core = ControlPlane(
        inventory,
        InMemoryJobStore(),
        FakeJobRunner(),
        clock,
        SequentialJobIds(),
        RecordingPublisher(),
        quotas={"team-a": Quota(gpus=1)},
    )
    manager = ServiceManager(core, clock)
    manager.create_service(
        ServiceSpec("web", ("fake-forever",), replicas=2, gpus=1, tenant="team-a")
    )
    manager.run_once()
    core.schedule_once()
    states = sorted(r.state for r in manager.get_service("web").replicas)
    assert states == ["PENDING", "STARTING"]
    (waiting,) = [r for r in manager.get_service("web").replicas if r.state == "PENDING"]
    assert "quota" in waiting.detail.lower(), waiting.detail


def test_a_higher_priority_job_preempts_a_replica_which_waits_and_comes_back_unrestarted() -> None:
    clock = ManualClock()
    runner = FakeJobRunner()
    policy = SchedulerPolicy(order=QueueOrder.PRIORITY, aging_rate=0.0, preemption=True)
    core = ControlPlane(
        Inventory((default_node(),), source="test", simulated=True),
        InMemoryJobStore(),
        runner,
        clock,
        SequentialJobIds(),
        RecordingPublisher(),
        scheduler_policy=policy,
    )
    manager = ServiceManager(core, clock)
    manager.create_service(ServiceSpec("big", ("fake-forever",), replicas=1, gpus=8))
    manager.run_once()
    core.schedule_once()
    (replica,) = manager.get_service("big").replicas
    assert replica.state == "STARTING" and len(replica.gpus) == 8
    urgent = core.submit(JobSpec(("fake-forever",), gpus=8, priority=10)).id
    clock.advance(1)
    core.schedule_once()
    runner.deliver()  # the replica's process takes its SIGTERM
    clock.advance(1)
    core.schedule_once()
    manager.run_once()
    assert core.get(urgent).state is JobState.RUNNING
    (replica,) = manager.get_service("big").replicas
    assert replica.state == "PENDING" and replica.restarts == 0
    core.cancel(urgent)
    runner.deliver()
    clock.advance(1)
    core.schedule_once()
    manager.run_once()
    (back,) = manager.get_service("big").replicas
    assert back.state == "STARTING" and back.job_id == replica.job_id and back.restarts == 0
