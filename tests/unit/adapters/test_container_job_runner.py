"""ContainerJobRunner over the fake runtime: what each container is given, reconciliation, and
the router that sends image tasks to it."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gpu_platform.adapters.outbound.containers import ContainerJobRunner
from gpu_platform.adapters.outbound.containers.job_runner import JOB_LABEL
from gpu_platform.adapters.outbound.process import ProcessJobRunner
from gpu_platform.application.image_jobs import ImageJobRouter
from gpu_platform.domain.model.job import JobSpec
from gpu_platform.ports.outbound.container_runtime import OWNER_LABEL, ContainerSpec
from gpu_platform.ports.outbound.job_runner import ExitReport, GangEnv, LaunchError, LaunchSpec
from gpu_platform.testing.container_fakes import FakeContainerRuntime

IMAGE = "fake/python:3"


def poll(cond: Callable[[], bool], timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.02)
    return cond()


def spec(
    *argv: str, gpus: tuple[int, ...] = (2, 5), vendor: str = "nvidia", **kw: object
) -> LaunchSpec:
    uuids = tuple(f"GPU-{i}" for i in gpus)
    return LaunchSpec("j-1", 1, 1, argv or ("true",), (("MINE", "yes"),), gpus, uuids,
                      vendor=vendor, image=IMAGE, **kw)  # type: ignore[arg-type]  # fmt: skip


@pytest.fixture
def runtime() -> Iterator[FakeContainerRuntime]:
    runtime = FakeContainerRuntime()
    yield runtime
    runtime.remove_all()


def runner_for(runtime: FakeContainerRuntime, tmp_path: Path, **kw: object) -> ContainerJobRunner:
    return ContainerJobRunner(runtime, tmp_path / "jobs", owner="node-a", **kw)  # type: ignore[arg-type]


def test_a_simulated_node_gives_the_bare_process_masks_and_no_devices(
    runtime: FakeContainerRuntime, tmp_path: Path
) -> None:
    box = runner_for(runtime, tmp_path, device_root=tmp_path).container_spec(spec())
    assert box.env["CUDA_VISIBLE_DEVICES"] == "2,5"
    assert box.env["NVIDIA_VISIBLE_DEVICES"] == "2,5"
    assert box.env["MINE"] == "yes"
    assert (box.env["RANK"], box.env["WORLD_SIZE"]) == ("0", "1")
    assert box.gpus is None
    assert box.devices == ()


def test_nvidia_gpus_handed_over_by_request_are_counted_from_zero_inside(
    runtime: FakeContainerRuntime, tmp_path: Path
) -> None:
    box = runner_for(runtime, tmp_path, gpu_requests=True).container_spec(spec())
    assert box.gpus is not None
    assert box.gpus.device_ids == ("GPU-2", "GPU-5")
    assert box.env["NVIDIA_VISIBLE_DEVICES"] == "GPU-2,GPU-5"
    assert box.env["CUDA_VISIBLE_DEVICES"] == "0,1"


def test_a_mig_job_is_handed_its_mig_instance_by_uuid(
    runtime: FakeContainerRuntime, tmp_path: Path
) -> None:
    mig = spec(gpus=(3,), mig_profile="1g.10gb", mig_uuids=("MIG-abc",))
    box = runner_for(runtime, tmp_path, gpu_requests=True).container_spec(mig)
    assert box.gpus is not None
    assert box.gpus.device_ids == ("MIG-abc",)
    assert box.env["CUDA_VISIBLE_DEVICES"] == "MIG-abc"


def test_amd_gpus_are_passed_as_their_device_nodes_only(
    runtime: FakeContainerRuntime, tmp_path: Path
) -> None:
    (tmp_path / "dri").mkdir()
    for name in ("dri/card0", "dri/card1", "dri/renderD128", "dri/renderD129", "kfd"):
        (tmp_path / name).touch()
    box = runner_for(runtime, tmp_path, device_root=tmp_path).container_spec(
        spec(gpus=(1,), vendor="amd")
    )
    assert box.devices == tuple(str(tmp_path / n) for n in ("dri/card1", "dri/renderD129", "kfd"))
    assert box.env["ROCR_VISIBLE_DEVICES"] == "0"
    assert box.env.get("CUDA_VISIBLE_DEVICES", "") == ""


def test_limits_pinning_mounts_and_labels_reach_the_container(
    runtime: FakeContainerRuntime, tmp_path: Path
) -> None:
    gang = GangEnv(world_size=2, local_rank=1, local_world_size=2, node_rank=0,
                   master_addr="10.0.0.1", master_port=29500)  # fmt: skip
    task = spec(memory_bytes=64 << 20, cpus=(0, 1), mems=(0,), rank=1, gang=gang,
                mounts=("/srv/data:/data:ro",))  # fmt: skip
    box: ContainerSpec = runner_for(runtime, tmp_path, pids_max=50).container_spec(task)
    assert (box.memory_bytes, box.cpus, box.mems, box.pids_max) == (64 << 20, (0, 1), (0,), 50)
    assert [(m.source, m.target, m.read_only) for m in box.mounts] == [("/srv/data", "/data", True)]
    assert box.labels[OWNER_LABEL] == "node-a"
    assert box.labels[JOB_LABEL] == "j-1"
    assert (box.env["RANK"], box.env["MASTER_ADDR"], box.env["MASTER_PORT"]) == (
        "1",
        "10.0.0.1",
        "29500",
    )
    assert box.name == "gpu-platform-node-a-j-1-1-1"


def test_an_unknown_account_is_a_launch_error(
    runtime: FakeContainerRuntime, tmp_path: Path
) -> None:
    with pytest.raises(LaunchError, match="no-such-user-here"):
        runner_for(runtime, tmp_path).start(spec(user="no-such-user-here"), lambda _: None)
    assert runtime.specs == []


def test_an_oom_killed_container_is_reported_out_of_memory(tmp_path: Path) -> None:
    class OomRuntime(FakeContainerRuntime):
        def wait(self, container_id: str):  # type: ignore[no-untyped-def]
            exit_ = super().wait(container_id)
            return type(exit_)(137, oom_killed=True)

    runtime = OomRuntime()
    reports: list[ExitReport] = []
    runner_for(runtime, tmp_path).start(spec("true", memory_bytes=1 << 20), reports.append)
    assert poll(lambda: len(reports) == 1)
    assert reports[0].signal == 9
    assert reports[0].reason == "out of memory: the container's memory limit is 1048576 bytes"


def test_reconcile_removes_only_this_nodes_containers_it_does_not_know(
    runtime: FakeContainerRuntime, tmp_path: Path
) -> None:
    before = runner_for(runtime, tmp_path)
    before.start(spec("sleep", "600"), lambda _: None)
    other = ContainerJobRunner(runtime, tmp_path / "b", owner="node-b")
    other.start(spec("sleep", "600"), lambda _: None)
    after = runner_for(runtime, tmp_path)  # the agent restarted: it knows no container
    assert after.reconcile() == 1
    assert [c.labels[OWNER_LABEL] for c in runtime.list_ours({})] == ["node-b"]
    assert other.reconcile() == 0
    other.close(grace_s=1)


def test_the_router_runs_image_tasks_in_containers_and_the_rest_as_processes(
    runtime: FakeContainerRuntime, tmp_path: Path
) -> None:
    bare = ProcessJobRunner(tmp_path / "jobs")
    router = ImageJobRouter(bare, runner_for(runtime, tmp_path))
    reports: list[ExitReport] = []
    router.start(spec("sh", "-c", "echo in-box"), reports.append)
    plain = LaunchSpec("j-2", 1, 1, ("sh", "-c", "echo bare"), (), (), ())
    router.start(plain, reports.append)
    assert poll(lambda: len(reports) == 2)
    assert [s.name for s in runtime.specs] == ["gpu-platform-node-a-j-1-1-0"]
    assert "in-box" in router.read_log("j-1", 1, 100)
    assert "bare" in router.read_log("j-2", 1, 100)
    router.close(grace_s=1)


def test_a_node_without_a_container_runtime_never_runs_an_image_task_bare(tmp_path: Path) -> None:
    bare = ProcessJobRunner(tmp_path / "jobs")
    try:
        with pytest.raises(LaunchError, match="no container runtime"):
            bare.start(spec("true"), lambda _: None)
    finally:
        bare.close(grace_s=1)


@pytest.mark.parametrize(
    ("image", "mounts", "error"),
    [
        (None, ("/a:/b",), "mounts need an image"),
        ("img", ("a:/b",), "absolute paths"),
        ("img", ("/a:/b:rx",), "absolute paths"),
        ("img", ("/a",), "absolute paths"),
        ("bad image", (), "without blanks"),
        ("", (), "without blanks"),
    ],
)
def test_a_job_spec_refuses_malformed_images_and_mounts(
    image: str | None, mounts: tuple[str, ...], error: str
) -> None:
    with pytest.raises(ValueError, match=error):
        JobSpec(("true",), image=image, mounts=mounts)


def test_a_job_spec_takes_an_image_with_mounts() -> None:
    job = JobSpec(("true",), image="reg.example/x:1", mounts=("/a:/b", "/c:/d:ro"))
    assert job.mounts == ("/a:/b", "/c:/d:ro")


def test_image_and_mounts_survive_the_grpc_request_and_the_replicated_record() -> None:
    from gpu_platform.adapters.inbound.grpc.convert import spec_from_pb
    from gpu_platform.adapters.inbound.grpc.v1 import gpu_platform_pb2 as pb
    from gpu_platform.domain.model_codec import decode_spec, encode_spec

    request = pb.SubmitJobRequest(command=["true"], image="img:1", mounts=["/a:/b:ro"])
    job = spec_from_pb(request)
    assert (job.image, job.mounts) == ("img:1", ("/a:/b:ro",))
    assert decode_spec(encode_spec(job)) == job
    assert spec_from_pb(pb.SubmitJobRequest(command=["true"])).image is None


def test_an_image_job_naming_no_account_runs_as_the_default_job_account(
    runtime: FakeContainerRuntime, tmp_path: Path
) -> None:
    import pwd

    nobody = pwd.getpwnam("nobody")
    box = runner_for(runtime, tmp_path, default_user="nobody").container_spec(spec())
    assert box.user == f"{nobody.pw_uid}:{nobody.pw_gid}"
    assert runner_for(runtime, tmp_path).container_spec(spec()).user is None  # the image's


def test_a_bind_mount_of_the_node_data_is_refused(
    runtime: FakeContainerRuntime, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    (data / "jobs").mkdir(parents=True)
    (tmp_path / "link").symlink_to(data)
    runner = runner_for(runtime, tmp_path, protected=(data,))
    for source in (data, data / "jobs", tmp_path / "link", tmp_path / "jobs"):
        with pytest.raises(LaunchError, match="permission denied"):
            runner.start(spec(mounts=(f"{source}:/d:ro",)), lambda _: None)
    assert runtime.specs == []
    box = runner.container_spec(spec(mounts=(f"{tmp_path / 'other'}:/d",)))
    assert [m.source for m in box.mounts] == [str(tmp_path / "other")]
