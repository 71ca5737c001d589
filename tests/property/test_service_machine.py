"""The service controller's rules under random histories: replicas never run twice, counts
stay within what the service asks for, and the controller itself never takes readiness below
`replicas` (only failures do)."""

from __future__ import annotations

import contextlib
from dataclasses import replace

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from gpu_platform.domain.errors import DomainError
from gpu_platform.domain.model.job import Allocation, Job, JobState
from gpu_platform.domain.services.commands import (
    CreateService,
    DeleteService,
    ReportReplicaHealth,
    ScaleService,
    UpdateService,
)
from gpu_platform.domain.services.model import ReplicaState, ServiceSpec
from gpu_platform.domain.services.reconcile import (
    StopReplicaJob,
    SubmitReplicaJob,
    reconcile,
    replica_state,
)
from gpu_platform.domain.services.table import ServiceTable

NAME = "svc"


def spec(replicas: int, version: int = 0) -> ServiceSpec:
    return ServiceSpec(
        NAME,
        ("serve", f"--v{version}"),
        replicas=replicas,
        backoff_s=1.0,
        max_backoff_s=8.0,
        startup_timeout_s=20.0,
        unhealthy_timeout_s=5.0,
        drain_s=1.0,
    )


class ServiceMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.table = ServiceTable()
        self.jobs: dict[str, Job] = {}
        self.now = 0.0
        self.epoch = 0
        self.version = 0

    # -- the user ----------------------------------------------------------------------------

    @precondition(lambda self: self.table.find(NAME) is None)
    @rule(replicas=st.integers(0, 4))
    def create(self, replicas: int) -> None:
        self.table.apply(CreateService(spec(replicas), self.now))
        self.reconcile_once()

    @rule(replicas=st.integers(0, 4))
    def scale(self, replicas: int) -> None:
        with contextlib.suppress(DomainError):
            self.table.apply(ScaleService(NAME, replicas, self.now))
        self.reconcile_once()

    @rule()
    def update(self) -> None:
        service = self.table.find(NAME)
        if service is None or service.deleting:
            return
        self.version += 1
        self.table.apply(UpdateService(spec(service.spec.replicas, self.version), self.now))
        self.reconcile_once()

    @rule()
    def delete(self) -> None:
        with contextlib.suppress(DomainError):
            self.table.apply(DeleteService(NAME, self.now))
        self.reconcile_once()

    # -- the world ---------------------------------------------------------------------------

    @rule(dt=st.sampled_from([0.5, 1.0, 3.0, 10.0]))
    def time_passes(self, dt: float) -> None:
        self.now += dt

    def _open(self, *states: JobState) -> list[str]:
        return sorted(j for j, job in self.jobs.items() if job.state in states)
        self.reconcile_once()

    @rule(data=st.data())
    def a_job_is_placed(self, data: st.DataObject) -> None:
        queued = self._open(JobState.QUEUED)
        if queued:
            job_id = data.draw(st.sampled_from(queued))
            self.epoch += 1
            alloc = Allocation("n0", (0,), ("G0",), self.epoch)
            job = self.jobs[job_id]
            self.jobs[job_id] = replace(
                job, state=JobState.RUNNING, allocation=alloc, started_at=self.now
            )
        self.reconcile_once()

    @rule(data=st.data(), ready=st.booleans())
    def a_probe_reports(self, data: st.DataObject, ready: bool) -> None:
        running = self._open(JobState.RUNNING)
        if running:
            job = self.jobs[data.draw(st.sampled_from(running))]
            assert job.allocation is not None
            report = ReportReplicaHealth(
                job.id, job.allocation.epoch, ready, "http://h:1", "" if ready else "503", self.now
            )
            self.table.apply(report)
        self.reconcile_once()

    @rule()
    def everything_comes_up(self) -> None:
        """Every waiting job is placed and every running one passes its check."""
        for job_id in self._open(JobState.QUEUED):
            self.epoch += 1
            alloc = Allocation("n0", (0,), ("G0",), self.epoch)
            job = self.jobs[job_id]
            self.jobs[job_id] = replace(
                job, state=JobState.RUNNING, allocation=alloc, started_at=self.now
            )
        for job_id in self._open(JobState.RUNNING):
            epoch = self.jobs[job_id].allocation.epoch  # type: ignore[union-attr]
            self.table.apply(ReportReplicaHealth(job_id, epoch, True, "http://h:1", "", self.now))
        self.reconcile_once()

    @rule(data=st.data(), requeue=st.booleans())
    def a_job_fails_or_its_node_is_lost(self, data: st.DataObject, requeue: bool) -> None:
        running = self._open(JobState.RUNNING)
        if running:
            job_id = data.draw(st.sampled_from(running))
            state = JobState.QUEUED if requeue else JobState.FAILED
            self.jobs[job_id] = replace(self.jobs[job_id], state=state, allocation=None)
        self.reconcile_once()

    # -- the controller ----------------------------------------------------------------------

    def _ready(self) -> int:
        service = self.table.find(NAME)
        if service is None:
            return 0
        return sum(
            1
            for r in service.replicas
            if not r.draining and replica_state(r, self.jobs.get(r.job_id)) is ReplicaState.READY
        )

    @rule()
    def reconcile_once(self) -> None:
        """The controller runs after every step (and may run again)."""
        service = self.table.find(NAME)
        if service is None:
            return
        wanted = 0 if service.deleting else service.spec.replicas
        before = self._ready()
        live_before = sum(1 for r in service.replicas if not r.draining)
        for action in reconcile(service, self.jobs.get, self.now):
            if isinstance(action, SubmitReplicaJob):
                if action.job_id not in self.jobs:
                    self.jobs[action.job_id] = Job(
                        action.job_id, action.spec, JobState.QUEUED, self.now
                    )
            elif isinstance(action, StopReplicaJob):
                job = self.jobs[action.job_id]
                assert not job.terminal, "the controller stops a job that already ended"
                self.jobs[action.job_id] = replace(job, state=JobState.CANCELLED, allocation=None)
            else:
                self.table.apply(action)
        after = self._ready()
        assert after >= min(before, wanted), f"controller took ready {before} -> {after}"
        service = self.table.find(NAME)
        if service is not None:
            live = [r for r in service.replicas if not r.draining]
            assert len(live) <= max(wanted + 1, live_before), (
                f"{len(live)} live replicas for {wanted} wanted"
            )

    # -- invariants --------------------------------------------------------------------------

    @invariant()
    def the_table_is_consistent(self) -> None:
        self.table.check_invariants()

    @invariant()
    def a_replica_never_runs_twice(self) -> None:
        live: dict[str, str] = {}
        for job in self.jobs.values():
            if not job.terminal:
                replica = job.spec.name
                assert replica not in live, f"{replica} runs as {live[replica]} and {job.id}"
                live[replica] = job.id

    @invariant()
    def every_live_replica_job_belongs_to_a_replica(self) -> None:
        for job in self.jobs.values():
            if job.state is JobState.RUNNING:
                assert self.table.replica_of(job.id) is not None, f"{job.id} runs no replica"


ServiceMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)
TestServiceMachine = ServiceMachine.TestCase
