from __future__ import annotations

from pathlib import Path

import pytest

from gpu_platform.adapters.outbound.mps import MpsDaemonController
from gpu_platform.adapters.outbound.mps.control import PID_FILE
from gpu_platform.ports.outbound.gpu_controller import ControllerUnavailable, MpsError
from gpu_platform.testing.fake_mps_control import write_fake_mps_control


@pytest.fixture
def ctl(tmp_path: Path):  # type: ignore[no-untyped-def]
    exe = write_fake_mps_control(tmp_path)
    c = MpsDaemonController(
        tmp_path / "pipe", tmp_path / "log", executable=str(exe), gpu_ids={0: "GPU-abc"}
    )
    yield c
    c.stop_mps(0)
    c.stop_mps(1)


def test_each_gpu_gets_its_own_pipe_directory_and_pid_file(ctl: MpsDaemonController) -> None:
    ctl.start_mps(0)
    ctl.start_mps(1)
    pid0 = (ctl.pipe_dir(0) / PID_FILE).read_text()
    pid1 = (ctl.pipe_dir(1) / PID_FILE).read_text()
    assert pid0 != pid1
    assert ctl.client_environment(1)["CUDA_MPS_PIPE_DIRECTORY"] == str(ctl.pipe_dir(1))


def test_the_daemon_sees_only_its_gpu_by_uuid(ctl: MpsDaemonController) -> None:
    assert ctl._env(0)["CUDA_VISIBLE_DEVICES"] == "GPU-abc"
    assert ctl._env(3)["CUDA_VISIBLE_DEVICES"] == "3"


def test_the_default_percentage_round_trips_through_the_daemon(ctl: MpsDaemonController) -> None:
    ctl.start_mps(0)
    assert ctl.default_active_thread_percentage(0) == 100.0
    ctl.set_default_active_thread_percentage(0, 35)
    assert ctl.default_active_thread_percentage(0) == 35.0


def test_a_rejected_command_is_an_mps_error_with_the_programs_message(
    ctl: MpsDaemonController,
) -> None:
    ctl.start_mps(0)
    with pytest.raises(MpsError, match="Unrecognized command"):
        ctl.command(0, "frobnicate")


def test_a_missing_executable_is_controller_unavailable(tmp_path: Path) -> None:
    ctl = MpsDaemonController(tmp_path, tmp_path, executable=str(tmp_path / "nope"))
    with pytest.raises(ControllerUnavailable):
        ctl.start_mps(0)


def test_a_stale_pid_file_does_not_count_as_a_running_daemon(
    ctl: MpsDaemonController,
) -> None:
    ctl.pipe_dir(0).mkdir(parents=True)
    (ctl.pipe_dir(0) / PID_FILE).write_text("999999999")
    assert not ctl.mps_running(0)
