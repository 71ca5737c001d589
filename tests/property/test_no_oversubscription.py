"""No sequence of submits (gangs too), cancels, completions, task failures, launch failures and
restarts ever gives one GPU to two running jobs, runs part of a gang, loses a job, or leaves a
job in two states."""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from gpu_platform.application.control_plane import ControlPlane
from gpu_platform.domain.errors import Conflict, InvalidRequest
from gpu_platform.domain.model.job import TERMINAL_JOB_STATES, JobSpec, JobState
from gpu_platform.domain.model.node import Inventory
from gpu_platform.testing.fakes import (
    FakeJobRunner,
    InMemoryJobStore,
    ManualClock,
    RecordingPublisher,
    SequentialJobIds,
)
from gpu_platform.testing.strategies import inventories


class ControlPlaneMachine(RuleBasedStateMachine):
    @initialize(inventory=inventories(max_nodes=3, max_gpus=8))
    def boot(self, inventory: Inventory) -> None:
        self.inventory = inventory
        self.store = InMemoryJobStore()
        self.clock = ManualClock()
        self.ids = SequentialJobIds()
        self.submitted: set[str] = set()
        self.completed: set[str] = set()
        self._new_plane()

    def _new_plane(self) -> None:
        self.runner = FakeJobRunner()
        self.plane = ControlPlane(
            self.inventory, self.store, self.runner, self.clock, self.ids, RecordingPublisher()
        )

    @rule(
        gpus=st.integers(0, 8),
        tasks=st.sampled_from([1, 1, 2, 3]),
        program=st.sampled_from(["fake-forever", "fake-exit", "nope"]),
    )
    def submit(self, gpus: int, tasks: int, program: str) -> None:
        argv = (program, "0") if program == "fake-exit" else (program,)
        try:
            job = self.plane.submit(JobSpec(argv, gpus=gpus, tasks=tasks))
        except InvalidRequest:  # could never fit this cluster: refused at the door
            fits = sum(len(n.gpus) // gpus if gpus else 1 for n in self.inventory.nodes)
            assert gpus > max(len(n.gpus) for n in self.inventory.nodes) or tasks > fits
            return
        self.submitted.add(job.id)
        self.clock.advance(1)

    @rule()
    def schedule(self) -> None:
        self.plane.schedule_once()

    @precondition(lambda self: bool(self.runner.live()))
    @rule(data=st.data(), code=st.integers(0, 2))
    def finish_one(self, data: st.DataObject, code: int) -> None:
        live = [s for s in self.runner.live()]
        spec = data.draw(st.sampled_from(live))
        whole = data.draw(st.booleans())  # every task of the attempt, or just this one
        self.runner.finish(spec.job_id, code, rank=None if whole else spec.rank)

    @rule()
    def deliver_exits(self) -> None:
        self.runner.deliver()

    @precondition(lambda self: bool(self.submitted))
    @rule(data=st.data())
    def cancel_one(self, data: st.DataObject) -> None:
        job_id = data.draw(st.sampled_from(sorted(self.submitted)))
        try:
            self.plane.cancel(job_id)
        except Conflict:
            assert self.plane.get(job_id).state in TERMINAL_JOB_STATES

    @rule()
    def crash_and_restart(self) -> None:
        # The old processes die with the old control plane; only the store survives.
        self.completed = {j.id for j in self.store.load() if j.state is JobState.COMPLETED}
        self._new_plane()
        self.plane.recover()

    @invariant()
    def no_gpu_is_given_twice(self) -> None:
        if not hasattr(self, "plane"):
            return
        self.plane.check_invariants()
        live_gpus = [u for s in self.runner.live() for u in s.gpu_uuids]
        assert len(live_gpus) == len(set(live_gpus)), "two live processes share a GPU"
        holders: dict[str, str] = {}
        for job in self.plane.list_jobs():
            if job.state in (JobState.SCHEDULED, JobState.RUNNING):
                assert job.allocation is not None
                assert len(job.allocation.tasks) == job.spec.tasks, "a gang bound in part"
                for uuid in job.allocation.all_gpu_uuids:
                    assert uuid not in holders, f"{uuid} held by {holders[uuid]} and {job.id}"
                    holders[uuid] = job.id
        for job in self.plane.list_jobs():
            if job.state is JobState.RUNNING:  # every task of a running attempt was started
                ranks = {
                    s.rank
                    for s in self.runner.started
                    if s.job_id == job.id and job.allocation and s.epoch == job.allocation.epoch
                }
                assert ranks == set(range(job.spec.tasks)), f"{job.id} runs ranks {ranks}"

    @invariant()
    def no_job_is_lost_and_each_has_one_state(self) -> None:
        if not hasattr(self, "plane"):
            return
        jobs = self.plane.list_jobs()
        assert {j.id for j in jobs} == self.submitted
        assert len(jobs) == len(self.submitted)
        assert {j.id: j for j in self.store.load()} == {j.id: j for j in jobs}

    @invariant()
    def a_completed_job_never_runs_again(self) -> None:
        if not hasattr(self, "plane"):
            return
        for job_id in self.completed:
            assert self.plane.get(job_id).state is JobState.COMPLETED
        assert all(s.job_id not in self.completed for s in self.runner.live())

    @invariant()
    def every_live_process_belongs_to_the_current_attempt_of_a_running_job(self) -> None:
        if not hasattr(self, "plane"):
            return
        for spec in self.runner.live():
            job = self.plane.get(spec.job_id)
            if job.state is JobState.RUNNING:
                assert job.allocation is not None and job.allocation.epoch == spec.epoch
            else:  # being stopped: cancelled or requeued, its GPUs already released
                assert job.allocation is None or job.allocation.epoch >= spec.epoch


ControlPlaneMachine.TestCase.settings = settings(
    max_examples=300, stateful_step_count=50, deadline=None
)
TestControlPlane = ControlPlaneMachine.TestCase
