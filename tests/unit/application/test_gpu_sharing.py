"""Shares of one GPU through the control plane (in-memory fakes): four quarter-GPU jobs pack
onto one GPU as MPS clients, a whole-GPU job never shares, a fault on a shared GPU re-queues
every sharer, CPU and GPU-memory quota caps bite, usage counts a share's fraction."""

from __future__ import annotations

import pytest

from gpu_platform.adapters.outbound.sim import default_node
from gpu_platform.application.control_plane import ControlPlane
from gpu_platform.application.usage import UsageService
from gpu_platform.domain.faults.health import XidReport
from gpu_platform.domain.model.job import JobSpec, JobState
from gpu_platform.domain.model.node import Inventory
from gpu_platform.domain.scheduling.model import Quota
from gpu_platform.testing.fakes import (
    FakeJobRunner,
    InMemoryJobStore,
    ManualClock,
    RecordingPublisher,
    SequentialJobIds,
)

GIB = 1 << 30


class Rig:
    def __init__(self, inventory: Inventory, quotas: dict[str, Quota] | None = None) -> None:
        self.runner = FakeJobRunner()
        self.clock = ManualClock()
        self.plane = ControlPlane(
            inventory,
            InMemoryJobStore(),
            self.runner,
            self.clock,
            SequentialJobIds(),
            RecordingPublisher(),
            quotas=quotas or {},
        )

    def submit(self, **fields: object) -> str:
        spec = JobSpec(("fake-forever",), **fields)  # type: ignore[arg-type]
        return self.plane.submit(spec).id

    def gpu_of(self, job_id: str) -> tuple[str, tuple[int, ...]]:
        alloc = self.plane.get(job_id).allocation
        assert alloc is not None
        return alloc.node, alloc.gpu_indices


@pytest.fixture
def rig(inventory: Inventory) -> Rig:
    return Rig(inventory)


def quarter(rig: Rig, **fields: object) -> str:
    return rig.submit(gpus=1, gpu_milli=250, gpu_memory_bytes=10 * GIB, **fields)


def test_four_quarter_gpu_jobs_share_one_gpu_as_mps_clients_and_a_whole_gpu_job_does_not(
    rig: Rig,
) -> None:
    sharers = [quarter(rig) for _ in range(4)]
    whole = rig.submit(gpus=1)
    assert rig.plane.schedule_once() == 5
    gpus = {rig.gpu_of(j) for j in sharers}
    assert len(gpus) == 1  # packed onto one GPU, not spread over four
    assert rig.gpu_of(whole) not in gpus
    for spec in rig.runner.started:
        if spec.job_id in sharers:
            assert spec.sharing == "mps" and spec.mps is not None
            assert spec.mps.active_thread_percentage == 25
            assert spec.mps.pinned_memory_bytes == 10 * GIB
        else:
            assert spec.sharing is None and spec.mps is None
    (shared,) = [g for g in rig.plane.gpus() if g.shares]
    assert sorted(s.job_id for s in shared.shares) == sorted(sharers)
    status = rig.plane.status()
    assert (status.gpus_shared, status.shares) == (1, 4)
    rig.plane.check_invariants()


def test_a_fifth_share_that_does_not_fit_takes_another_gpu(rig: Rig) -> None:
    first = [quarter(rig) for _ in range(4)]
    rig.plane.schedule_once()
    fifth = quarter(rig)
    rig.plane.schedule_once()
    assert rig.gpu_of(fifth) != rig.gpu_of(first[0])


def test_memory_pinned_by_shares_never_exceeds_the_gpu(rig: Rig) -> None:
    big = rig.submit(gpus=1, gpu_milli=100, gpu_memory_bytes=70 * GIB)  # A100 80 GB
    other = rig.submit(gpus=1, gpu_milli=100, gpu_memory_bytes=20 * GIB)
    rig.plane.schedule_once()
    assert rig.gpu_of(big) != rig.gpu_of(other)  # compute would fit, memory would not


def test_a_share_without_memory_pins_its_fraction_and_timeslice_runs_without_mps(
    rig: Rig,
) -> None:
    job = rig.submit(gpus=1, gpu_milli=500, sharing="timeslice")
    rig.plane.schedule_once()
    (spec,) = rig.runner.started
    assert (spec.job_id, spec.sharing, spec.mps) == (job, "timeslice", None)
    (shared,) = [g for g in rig.plane.gpus() if g.shares]
    assert shared.shares[0].pinned_bytes == shared.gpu.memory_bytes // 2


def test_an_xid_on_a_shared_gpu_requeues_every_sharer(rig: Rig) -> None:
    sharers = [quarter(rig) for _ in range(4)]
    rig.plane.schedule_once()
    node, (index,) = rig.gpu_of(sharers[0])
    rig.plane.report_health(XidReport(node, index, 79))
    rig.runner.deliver()
    for job_id in sharers:
        job = rig.plane.get(job_id)
        assert job.state is JobState.QUEUED and job.faults == 1, job
        assert f"gpu {node}:{index}" in job.reason
    rig.plane.schedule_once()
    again = {rig.gpu_of(j) for j in sharers}
    assert again != {(node, (index,))} and len(again) == 1  # together, on another GPU


def test_cpu_requests_are_placed_against_the_nodes_cpus(rig: Rig) -> None:
    cpus = default_node().cpus
    a = rig.submit(cpu_milli=cpus * 1000 // 2)
    b = rig.submit(cpu_milli=cpus * 1000 // 2)
    c = rig.submit(cpu_milli=1000)
    rig.plane.schedule_once()
    assert rig.plane.get(a).state is rig.plane.get(b).state is JobState.RUNNING
    assert rig.plane.get(c).state is JobState.QUEUED
    (spec_a, *_) = rig.runner.started
    assert spec_a.cpu_milli == cpus * 500


def test_a_tenant_capped_at_two_cpus_cannot_start_a_four_cpu_job(inventory: Inventory) -> None:
    rig = Rig(inventory, {"capped": Quota(gpus=8, cpu_milli=2000)})
    big = rig.submit(tenant="capped", cpu_milli=4000)
    small = rig.submit(tenant="capped", cpu_milli=2000, gpus=1)
    rig.plane.schedule_once()
    assert rig.plane.get(big).state is JobState.QUEUED
    why = rig.plane.why(big)
    assert why is not None and "CPU quota" in why.message and "4000" in why.message
    assert rig.plane.get(small).state is JobState.RUNNING


def test_a_gpu_memory_quota_caps_what_shares_may_pin(inventory: Inventory) -> None:
    rig = Rig(inventory, {"t": Quota(gpus=8, gpu_memory_bytes=25 * GIB)})
    first, second, third = (quarter(rig, tenant="t") for _ in range(3))
    rig.plane.schedule_once()
    assert [rig.plane.get(j).state for j in (first, second, third)] == [
        JobState.RUNNING,
        JobState.RUNNING,
        JobState.QUEUED,
    ]
    why = rig.plane.why(third)
    assert why is not None and "GPU memory quota" in why.message


def test_a_tenant_without_a_quota_runs_on_idle_gpus_once_another_has_one(
    inventory: Inventory,
) -> None:
    rig = Rig(inventory, {"owner": Quota(gpus=4)})
    guest = rig.submit(tenant="guest", gpus=2)
    share = quarter(rig, tenant="guest")
    rig.plane.schedule_once()
    assert rig.plane.get(guest).state is rig.plane.get(share).state is JobState.RUNNING


def test_usage_counts_a_share_as_its_fraction_of_a_gpu_times_its_running_time(rig: Rig) -> None:
    job = quarter(rig)
    rig.plane.schedule_once()
    rig.clock.advance(3600)
    report = UsageService(rig.plane, rig.clock).usage()
    (row,) = [r for r in report.jobs if r.job_id == job]
    assert row.gpu_seconds == pytest.approx(900.0)  # 0.25 GPU x 1 h
