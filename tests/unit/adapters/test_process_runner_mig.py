"""The process runner and MIG jobs: the masks name the MIG devices, a real process sees them,
the device allow-list keeps the parent GPU, and a MIG job without an instance never starts."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gpu_platform.adapters.outbound.cgroups.devices import NVIDIA_MAJOR
from gpu_platform.adapters.outbound.process import ProcessJobRunner
from gpu_platform.adapters.outbound.process.runner import visibility_env
from gpu_platform.ports.outbound.isolation import DeviceRule
from gpu_platform.ports.outbound.job_runner import ExitReport, LaunchError, LaunchSpec

MIG_A = "MIG-4b9a0d1e-5c3f-5b7e-9f1a-2c8d7e6f5a41"
MIG_B = "MIG-0f6e2a8b-1d4c-5e9f-8a7b-3c2d1e0f9a8b"


def wait_for(cond: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not cond():
        time.sleep(0.02)
    return cond()


def mig_spec(argv: tuple[str, ...] = ("true",), **kw: object) -> LaunchSpec:
    base: dict[str, object] = dict(
        job_id="j-mig",
        epoch=3,
        attempt=1,
        argv=argv,
        env=(),
        gpu_indices=(2,),
        gpu_uuids=("GPU-parent",),
        mig_profile="1g.10gb",
        mig_uuids=(MIG_A,),
    )
    base.update(kw)
    return LaunchSpec(**base)  # type: ignore[arg-type]


@pytest.fixture
def runner(tmp_path: Path) -> Iterator[ProcessJobRunner]:
    r = ProcessJobRunner(tmp_path / "jobs", base_env={"PATH": os.environ["PATH"]})
    yield r
    r.close(grace_s=1)


@pytest.mark.parametrize("mode", ["index", "uuid"])
def test_a_mig_job_sees_only_its_mig_devices_whatever_the_naming_mode(mode: str) -> None:
    env = visibility_env(mig_spec(mig_uuids=(MIG_A, MIG_B)), mode)  # type: ignore[arg-type]
    assert env["CUDA_VISIBLE_DEVICES"] == f"{MIG_A},{MIG_B}"
    assert env["NVIDIA_VISIBLE_DEVICES"] == f"{MIG_A},{MIG_B}"
    assert env["ROCR_VISIBLE_DEVICES"] == env["HIP_VISIBLE_DEVICES"] == ""
    assert env["ZE_AFFINITY_MASK"] == ""


def test_a_launch_spec_takes_only_nvidia_mig_device_uuids() -> None:
    with pytest.raises(ValueError, match="start with 'MIG-'"):
        mig_spec(mig_uuids=("GPU-parent",))
    with pytest.raises(ValueError, match="not amd"):
        mig_spec(vendor="amd")


def test_a_real_mig_job_process_sees_its_mig_uuid(runner: ProcessJobRunner) -> None:
    code = (
        "import os; print(os.environ['CUDA_VISIBLE_DEVICES'], os.environ['NVIDIA_VISIBLE_DEVICES'])"
    )
    reports: list[ExitReport] = []
    runner.start(mig_spec((sys.executable, "-c", code)), reports.append)
    assert wait_for(lambda: bool(reports))
    assert reports[0].exit_code == 0
    assert runner.read_log("j-mig", 1, 1000) == f"{MIG_A} {MIG_A}\n"


def test_a_mig_job_without_an_instance_is_refused_and_names_the_setting(
    runner: ProcessJobRunner,
) -> None:
    with pytest.raises(LaunchError, match="mig_controller"):
        runner.start(mig_spec(mig_uuids=()), lambda _report: None)


def test_the_device_allow_list_keeps_the_parent_gpu_and_the_mig_capability_nodes(
    tmp_path: Path,
) -> None:
    r = ProcessJobRunner(tmp_path / "jobs", device_majors={"nvidia-caps": 237, "nvidia-uvm": 509})
    try:
        rules = set(r.isolation_spec(mig_spec()).devices)
    finally:
        r.close(grace_s=1)
    assert DeviceRule("c", NVIDIA_MAJOR, 2) in rules  # /dev/nvidia2, the parent GPU
    assert DeviceRule("c", 237, None) in rules  # /dev/nvidia-caps/*: the MIG access caps
    assert DeviceRule("c", NVIDIA_MAJOR, 0) not in rules
