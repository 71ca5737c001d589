"""MIG jobs through the control plane and the MigJobRunner, on the fake pynvml: a job asking
for a profile lands on a GPU model that has it, gets an instance there (reused, else created
where the planner says), and its launch carries that instance's MIG UUID; every way it can
go wrong fails the attempt with the reason."""

from __future__ import annotations

import pytest

from gpu_platform.adapters.outbound.nvml.mig import NvmlMigController
from gpu_platform.adapters.outbound.sim.inventory import build_node
from gpu_platform.application.control_plane import ControlPlane
from gpu_platform.application.mig_jobs import MigJobRunner
from gpu_platform.domain.allocation.mig_tables import A100_80GB
from gpu_platform.domain.errors import InvalidRequest
from gpu_platform.domain.model.job import JobSpec, JobState
from gpu_platform.domain.model.node import Inventory
from gpu_platform.ports.outbound.job_runner import ExitReport, LaunchError, LaunchSpec
from gpu_platform.testing.fake_nvml_mig import FakeNvmlMig
from gpu_platform.testing.fakes import (
    FakeJobRunner,
    InMemoryJobStore,
    ManualClock,
    RecordingPublisher,
    SequentialJobIds,
)

P_3G_40 = A100_80GB.profile("3g.40gb").profile_id


class Rig:
    """One node: GPU 0 an L40S (no MIG), GPU 1 an A100-80GB with MIG on (the fake pynvml's
    device 1; its device 0 stands for the L40S and has MIG off)."""

    def __init__(self, mig_on: bool = True) -> None:
        node = build_node(
            "n0",
            [
                {"index": 0, "model": "L40S", "memory_gib": 48},
                {"index": 1, "model": "A100-SXM4-80GB"},
            ],
        )
        self.nvml = FakeNvmlMig([(A100_80GB, False), (A100_80GB, mig_on)])
        self.mig = NvmlMigController(self.nvml)
        self.inner = FakeJobRunner()
        self.runner = MigJobRunner(self.inner, self.mig, {g.index: g.model for g in node.gpus})
        self.plane = ControlPlane(
            Inventory((node,), source="sim", simulated=True),
            InMemoryJobStore(),
            self.runner,
            ManualClock(),
            SequentialJobIds(),
            RecordingPublisher(),
        )

    def submit(self, profile: str | None, gpus: int = 1, **kw: object) -> str:
        spec = JobSpec(("fake-forever",), gpus=gpus, mig_profile=profile, **kw)  # type: ignore[arg-type]
        return self.plane.submit(spec).id

    def launched(self, job_id: str) -> LaunchSpec:
        return next(s for s in reversed(self.inner.started) if s.job_id == job_id)


def test_a_mig_job_runs_on_a_gpu_with_the_profile_and_gets_a_new_instances_uuid() -> None:
    rig = Rig()
    job = rig.submit("3g.40gb")
    rig.plane.schedule_once()
    assert rig.plane.get(job).state is JobState.RUNNING
    spec = rig.launched(job)
    assert spec.gpu_indices == (1,) and spec.mig_profile == "3g.40gb"
    live = rig.mig.list_mig_instances(1)
    assert [(m.profile_id, m.uuid) for m in live] == [(P_3G_40, spec.mig_uuids[0])]
    assert spec.mig_uuids[0].startswith("MIG-")


def test_the_next_mig_job_on_the_gpu_reuses_the_instance() -> None:
    rig = Rig()
    first = rig.submit("3g.40gb")
    rig.plane.schedule_once()
    uuid = rig.launched(first).mig_uuids
    rig.plane.cancel(first)
    rig.inner.deliver()
    second = rig.submit("3g.40gb")
    rig.plane.schedule_once()
    assert rig.plane.get(second).state is JobState.RUNNING
    assert rig.launched(second).mig_uuids == uuid
    assert len(rig.mig.list_mig_instances(1)) == 1


def test_a_second_mig_job_waits_for_the_gpu_a_mig_job_holds() -> None:
    rig = Rig()
    first, second = rig.submit("1g.10gb"), rig.submit("1g.10gb")
    rig.plane.schedule_once()
    assert rig.plane.get(first).state is JobState.RUNNING
    assert rig.plane.get(second).state is JobState.QUEUED  # whole-GPU MIG: one job per GPU


def test_an_ordinary_job_is_passed_through_unchanged() -> None:
    rig = Rig()
    job = rig.submit(None, gpus=2)
    rig.plane.schedule_once()
    assert rig.launched(job).mig_uuids == () and rig.mig.list_mig_instances(1) == []


@pytest.mark.parametrize(
    ("profile", "gpus", "words"),
    [
        ("1g.7gb", 1, "unknown MIG profile"),
        ("1g.10gb", 2, "gpus must be 1"),
        ("1g.5gb", 1, "could never be placed"),  # an A100-40GB profile; the node has 80GB
    ],
)
def test_a_mig_request_that_can_never_run_is_refused_at_submit(
    profile: str, gpus: int, words: str
) -> None:
    rig = Rig()
    with pytest.raises(InvalidRequest) as err:
        rig.submit(profile, gpus=gpus)
    assert err.value.field == "mig_profile" and words in err.value.reason


def test_a_gpu_with_mig_off_fails_the_attempt_and_says_how_to_enable_it() -> None:
    rig = Rig(mig_on=False)
    job = rig.submit("1g.10gb")
    rig.plane.schedule_once()
    got = rig.plane.get(job)
    assert got.state is JobState.FAILED
    assert "not in MIG mode" in got.reason and "nvidia-smi -i 1 -mig 1" in got.reason


def test_a_gpu_with_no_room_for_the_profile_fails_the_attempt_with_the_planners_reason() -> None:
    rig = Rig()
    rig.mig.create_mig_instance(1, A100_80GB.profile("7g.80gb").profile_id, 0)  # by an admin
    job = rig.submit("1g.10gb")
    rig.plane.schedule_once()
    got = rig.plane.get(job)
    assert got.state is JobState.FAILED and "no room for 1g.10gb" in got.reason


def test_the_mig_runner_refuses_a_gpu_model_without_a_mig_table() -> None:
    rig = Rig()
    spec = LaunchSpec("j", 1, 1, ("fake-forever",), (), (0,), ("GPU-l40s",), mig_profile="1g.10gb")
    reports: list[ExitReport] = []
    with pytest.raises(LaunchError, match="L40S"):
        rig.runner.start(spec, reports.append)
    assert rig.inner.started == []


def test_the_mig_profile_survives_the_store_codec_and_old_rows_load_without_one() -> None:
    from gpu_platform.adapters.outbound.storage.codec import job_from_dict, job_to_dict

    rig = Rig()
    job = rig.plane.get(rig.submit("1g.10gb"))
    assert job_from_dict(job_to_dict(job)) == job
    old = job_to_dict(job)
    del old["spec"]["mig_profile"]  # a row written before the field existed
    assert job_from_dict(old).spec.mig_profile is None


def test_the_mig_profile_crosses_grpc_both_ways() -> None:
    from gpu_platform.adapters.inbound.grpc.convert import job_to_pb, spec_from_pb
    from gpu_platform.adapters.inbound.grpc.v1 import gpu_platform_pb2 as pb

    req = pb.SubmitJobRequest(command=["true"], gpus=1, mig_profile="3g.40gb")
    assert spec_from_pb(req).mig_profile == "3g.40gb"
    assert spec_from_pb(pb.SubmitJobRequest(command=["true"])).mig_profile is None
    rig = Rig()
    msg = job_to_pb(rig.plane.get(rig.submit("3g.40gb")))
    assert msg.HasField("mig_profile") and msg.mig_profile == "3g.40gb"
    assert not job_to_pb(rig.plane.get(rig.submit(None))).HasField("mig_profile")
