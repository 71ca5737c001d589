"""MpsJobRunner over the real MpsDaemonController and a fake `nvidia-cuda-mps-control`
(real daemon processes): the GPU's daemon starts for its first MPS client, every client gets
its limits and the daemon's pipe directory, and the daemon stops after the last one ends."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gpu_platform.adapters.outbound.mps.control import MpsDaemonController
from gpu_platform.application.mps_jobs import MpsJobRunner
from gpu_platform.domain.allocation.mps import MpsShare
from gpu_platform.ports.outbound.job_runner import ExitReport, LaunchError, LaunchSpec
from gpu_platform.testing.fake_mps_control import write_fake_mps_control
from gpu_platform.testing.fakes import FakeJobRunner

GIB = 1 << 30


@pytest.fixture
def controller(tmp_path: Path) -> Iterator[MpsDaemonController]:
    exe = write_fake_mps_control(tmp_path)
    ctl = MpsDaemonController(tmp_path / "pipe", tmp_path / "log", executable=str(exe))
    yield ctl
    for gpu in range(2):
        ctl.stop_mps(gpu)  # nothing left behind, whatever the test did


def share(job: str, gpu: int = 1, sharing: str = "mps") -> LaunchSpec:
    mps = MpsShare(job, 25, 10 * GIB) if sharing == "mps" else None
    return LaunchSpec(
        job, 1, 1, ("fake-forever",), (), (gpu,), (f"GPU-{gpu}",), sharing=sharing, mps=mps
    )


def test_the_daemon_runs_from_the_first_client_to_the_last(
    controller: MpsDaemonController,
) -> None:
    inner = FakeJobRunner()
    runner = MpsJobRunner(inner, controller)
    reports: list[ExitReport] = []
    for job in ("a", "b", "c", "d"):
        runner.start(share(job), reports.append)
    assert controller.mps_running(1) and not controller.mps_running(0)
    assert runner.clients() == {1: 4}
    for spec in inner.started:
        env = dict(spec.env)
        assert env["CUDA_MPS_PIPE_DIRECTORY"] == str(controller.pipe_dir(1))
        assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "25"
        assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=10240MB"
    for job in ("a", "b", "c"):
        inner.finish(job, 0)
    inner.deliver()
    assert controller.mps_running(1)  # one client left
    inner.finish("d", 0)
    inner.deliver()
    assert not controller.mps_running(1)
    assert sorted(r.job_id for r in reports) == ["a", "b", "c", "d"]
    assert runner.clients() == {}


def test_a_time_sliced_share_and_whole_gpus_start_no_daemon(
    controller: MpsDaemonController,
) -> None:
    inner = FakeJobRunner()
    runner = MpsJobRunner(inner, controller)
    runner.start(share("t", sharing="timeslice"), lambda _: None)
    runner.start(LaunchSpec("w", 1, 1, ("fake-forever",), (), (0,), ("GPU-0",)), lambda _: None)
    assert not controller.mps_running(0) and not controller.mps_running(1)
    assert "CUDA_MPS_PIPE_DIRECTORY" not in dict(inner.started[0].env)


def test_a_client_that_fails_to_launch_does_not_keep_the_daemon(
    controller: MpsDaemonController,
) -> None:
    runner = MpsJobRunner(FakeJobRunner(), controller)
    bad = LaunchSpec(
        "x", 1, 1, ("no-such-program",), (), (1,), ("GPU-1",), sharing="mps",
        mps=MpsShare("x", 50, GIB),
    )  # fmt: skip
    with pytest.raises(LaunchError):
        runner.start(bad, lambda _: None)
    assert not controller.mps_running(1) and runner.clients() == {}


def test_a_daemon_that_cannot_start_fails_the_launch(tmp_path: Path) -> None:
    ctl = MpsDaemonController(tmp_path / "p", tmp_path / "l", executable=str(tmp_path / "none"))
    with pytest.raises(LaunchError, match="MPS daemon did not start"):
        MpsJobRunner(FakeJobRunner(), ctl).start(share("y"), lambda _: None)
