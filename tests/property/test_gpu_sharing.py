"""For any sequence of fractional, whole-GPU and MIG submits, scheduling cycles, finishes and XIDs
through the control plane (the production scheduling path), no GPU ever
has pinned memory above its capacity or compute shares above 1000 milli-GPU, a whole-GPU job
never shares its GPU, no node's CPU requests exceed its CPUs, and the kept placement view
always equals one rebuilt from the state."""

from __future__ import annotations

import contextlib

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from gpu_platform.adapters.outbound.sim import default_node
from gpu_platform.application.control_plane import ControlPlane
from gpu_platform.domain.errors import InvalidRequest
from gpu_platform.domain.faults.health import XidReport
from gpu_platform.domain.model.job import JobSpec, JobState
from gpu_platform.domain.model.node import Inventory
from gpu_platform.domain.model.sharing import MILLI, pinned_bytes
from gpu_platform.domain.scheduling.live_view import rebuild, view_contents
from gpu_platform.testing.fakes import (
    FakeJobRunner,
    InMemoryJobStore,
    ManualClock,
    RecordingPublisher,
    SequentialJobIds,
)

GIB = 1 << 30
LIVE = (JobState.SCHEDULED, JobState.RUNNING)


class SharingMachine(RuleBasedStateMachine):
    @initialize()
    def boot(self) -> None:
        self.clock = ManualClock()
        self.runner = FakeJobRunner()
        inventory = Inventory((default_node(),), source="sim", simulated=True)
        self.node = inventory.nodes[0]
        self.plane = ControlPlane(
            inventory,
            InMemoryJobStore(),
            self.runner,
            self.clock,
            SequentialJobIds(),
            RecordingPublisher(),
        )

    @rule(
        milli=st.sampled_from([100, 250, 250, 333, 500, 750, 999]),
        memory_gib=st.sampled_from([None, 1, 10, 20, 40, 79]),
        cpus=st.sampled_from([0, 0, 8000, 64000]),
        sharing=st.sampled_from([None, "mps", "timeslice"]),
    )
    def submit_share(self, milli: int, memory_gib: int | None, cpus: int, sharing: str) -> None:
        memory = None if memory_gib is None else memory_gib * GIB
        spec = JobSpec(
            ("fake-forever",),
            gpus=1,
            gpu_milli=milli,
            gpu_memory_bytes=memory,
            cpu_milli=cpus,
            sharing=sharing,
        )
        self.plane.submit(spec)

    @rule(gpus=st.integers(1, 4), cpus=st.sampled_from([0, 16000]))
    def submit_whole(self, gpus: int, cpus: int) -> None:
        self.plane.submit(JobSpec(("fake-forever",), gpus=gpus, cpu_milli=cpus))

    @rule()
    def submit_mig(self) -> None:  # no MIG instance in the fake runner: its launch fails
        with contextlib.suppress(InvalidRequest):
            self.plane.submit(JobSpec(("fake-forever",), gpus=1, mig_profile="1g.10gb"))

    @rule()
    def schedule(self) -> None:
        self.plane.schedule_once()
        self.runner.deliver()

    @rule(data=st.data())
    def finish_one(self, data: st.DataObject) -> None:
        live = self.runner.live()
        if live:
            spec = data.draw(st.sampled_from(live))
            self.runner.finish(spec.job_id, 0)
            self.runner.deliver()

    @rule(gpu=st.integers(0, 7), xid=st.sampled_from([13, 48, 79]))
    def xid(self, gpu: int, xid: int) -> None:
        self.plane.report_health(XidReport(self.node.name, gpu, xid))
        self.runner.deliver()
        self.clock.advance(1)

    @invariant()
    def no_gpu_oversubscribed_and_whole_gpus_never_shared(self) -> None:
        holders: dict[int, list[JobSpec]] = {}
        cpu = 0
        for job in self.plane.list_jobs():
            if not job.holds_gpus:
                continue
            assert job.allocation is not None
            cpu += job.spec.cpu_milli
            for index in job.allocation.gpu_indices:
                holders.setdefault(index, []).append(job.spec)
        for index, specs in holders.items():
            capacity = self.node.gpu(index).memory_bytes
            if any(s.gpu_milli == MILLI for s in specs):
                assert len(specs) == 1, f"GPU {index}: a whole-GPU job shares it"
                continue
            assert sum(s.gpu_milli for s in specs) <= MILLI, f"GPU {index}: compute over 1000"
            pinned = sum(pinned_bytes(s.gpu_milli, s.gpu_memory_bytes, capacity) for s in specs)
            assert pinned <= capacity, f"GPU {index}: pinned memory above its memory"
        assert cpu <= self.node.cpus * 1000, "CPU requests above the node's CPUs"

    @invariant()
    def the_state_and_the_kept_view_agree(self) -> None:
        self.plane.check_invariants()
        state = self.plane._state
        kept = self.plane._live_view.sync(state)
        assert view_contents(kept) == view_contents(rebuild(state))
        kept.check_invariants()


TestSharing = SharingMachine.TestCase
TestSharing.settings = settings(
    max_examples=40,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
