"""ProcessJobRunner specifics beyond the port contract: environment, process groups, reaping."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gpu_platform.adapters.outbound.process import ProcessJobRunner
from gpu_platform.ports.outbound.job_runner import ExitReport, LaunchError, LaunchSpec


def wait_for(cond: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not cond():
        time.sleep(0.02)
    return cond()


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is dead for our purposes
    return "Z" not in Path(f"/proc/{pid}/stat").read_text().split(")")[1].split()[0]


def spec(argv: tuple[str, ...], **kw: object) -> LaunchSpec:
    base: dict[str, object] = dict(
        job_id="j-1",
        epoch=7,
        attempt=1,
        argv=argv,
        env=(),
        gpu_indices=(2, 5),
        gpu_uuids=("a", "b"),
    )
    base.update(kw)
    return LaunchSpec(**base)  # type: ignore[arg-type]


@pytest.fixture
def runner(tmp_path: Path) -> Iterator[ProcessJobRunner]:
    r = ProcessJobRunner(tmp_path / "jobs", base_env={"PATH": os.environ["PATH"], "BASE": "1"})
    yield r
    r.close(grace_s=1)


def test_the_job_sees_its_gpus_its_env_and_the_attempt_marker(runner: ProcessJobRunner) -> None:
    code = "import os; print(os.environ['CUDA_VISIBLE_DEVICES'], os.environ['BASE'], os.environ['MINE'], os.environ['GPU_PLATFORM_ATTEMPT'])"
    reports: list[ExitReport] = []
    runner.start(spec((sys.executable, "-c", code), env=(("MINE", "x"),)), reports.append)
    assert wait_for(lambda: bool(reports))
    assert runner.read_log("j-1", 1, 1000) == "2,5 1 x j-1:7\n"


def test_a_cpu_only_job_sees_no_gpu(runner: ProcessJobRunner) -> None:
    reports: list[ExitReport] = []
    code = "import os; print(repr(os.environ['CUDA_VISIBLE_DEVICES']))"
    runner.start(spec((sys.executable, "-c", code), gpu_indices=(), gpu_uuids=()), reports.append)
    assert wait_for(lambda: bool(reports))
    assert runner.read_log("j-1", 1, 1000) == "''\n"


def test_stdout_and_stderr_share_the_attempt_log_and_the_default_cwd_is_the_job_dir(
    runner: ProcessJobRunner,
) -> None:
    reports: list[ExitReport] = []
    code = "import os, sys; print('out'); sys.stdout.flush(); print('err', file=sys.stderr); print(os.getcwd())"
    runner.start(spec((sys.executable, "-c", code)), reports.append)
    assert wait_for(lambda: bool(reports))
    assert runner.read_log("j-1", 1, 1000).splitlines() == [
        "out",
        "err",
        str(runner.log_root / "j-1"),
    ]


def test_a_missing_working_directory_is_a_launch_error(runner: ProcessJobRunner) -> None:
    with pytest.raises(LaunchError, match="working directory"):
        runner.start(spec(("true",), cwd="/nonexistent/dir"), lambda r: None)


def test_a_process_that_ignores_sigterm_is_killed_after_the_grace_period(
    runner: ProcessJobRunner,
) -> None:
    reports: list[ExitReport] = []
    code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); time.sleep(600)"
    runner.start(spec((sys.executable, "-c", code)), reports.append)
    assert wait_for(lambda: "ready" in runner.read_log("j-1", 1, 100))
    runner.stop("j-1", 7, grace_s=0.2)
    assert wait_for(lambda: bool(reports))
    assert reports[0].signal == signal.SIGKILL


def test_a_kill_during_the_grace_period_escalates_to_sigkill_at_once(
    runner: ProcessJobRunner,
) -> None:
    reports: list[ExitReport] = []
    code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); time.sleep(600)"
    runner.start(spec((sys.executable, "-c", code)), reports.append)
    assert wait_for(lambda: "ready" in runner.read_log("j-1", 1, 100))
    runner.stop("j-1", 7, grace_s=600)  # cancel: SIGTERM, ignored; SIGKILL only in 10 minutes
    runner.stop("j-1", 7, grace_s=0)  # kill
    assert wait_for(lambda: bool(reports))
    assert reports[0].signal == signal.SIGKILL


def test_no_process_of_the_job_outlives_its_exit_report(runner: ProcessJobRunner) -> None:
    # The job forks a grandchild into its own process group and exits at once.
    code = (
        "import subprocess, sys; p = subprocess.Popen(['sleep', '600']); print(p.pid, flush=True)"
    )
    reports: list[ExitReport] = []
    runner.start(spec((sys.executable, "-c", code)), reports.append)
    assert wait_for(lambda: bool(reports))
    grandchild = int(runner.read_log("j-1", 1, 100).strip())
    assert wait_for(lambda: not alive(grandchild))


def test_a_grandchild_that_left_the_session_dies_with_its_attempt_without_cgroups(
    runner: ProcessJobRunner,
) -> None:
    code = (
        "import os, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid(); print(os.getpid(), flush=True); time.sleep(600)\n"
        "time.sleep(0.5)\n"
    )
    reports: list[ExitReport] = []
    runner.start(spec((sys.executable, "-c", code)), reports.append)
    assert wait_for(lambda: bool(reports))
    escaped = int(runner.read_log("j-1", 1, 100).strip())
    assert wait_for(lambda: not alive(escaped))


def test_reap_kills_leftovers_of_an_attempt_by_its_marker(tmp_path: Path) -> None:
    env = dict(os.environ, GPU_PLATFORM_ATTEMPT="j-9:3")
    orphan = subprocess.Popen(["sleep", "600"], env=env, start_new_session=True)
    bystander = subprocess.Popen(["sleep", "600"], env=dict(env, GPU_PLATFORM_ATTEMPT="j-9:4"))
    runner = ProcessJobRunner(tmp_path)
    try:
        for proc, marker in ((orphan, b"j-9:3"), (bystander, b"j-9:4")):
            _wait_for_environ(proc.pid, b"GPU_PLATFORM_ATTEMPT=" + marker)
        assert runner.reap("j-9", 3) == 1
        assert orphan.wait(timeout=10) == -signal.SIGKILL
        assert bystander.poll() is None
    finally:
        for proc in (orphan, bystander):
            proc.kill()
            proc.wait()
        runner.close(grace_s=1)


def _wait_for_environ(pid: int, entry: bytes, timeout: float = 10.0) -> None:
    """Until `pid` has exec'd with `entry` in its environment: between fork and exec
    /proc/PID/environ is still the parent's, and a reap then rightly finds nothing."""
    deadline = time.monotonic() + timeout
    while entry not in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
        assert time.monotonic() < deadline, f"{pid} never exec'd with {entry!r}"
        time.sleep(0.01)


def test_a_job_dies_with_the_process_that_launched_it(tmp_path: Path) -> None:
    # A separate Python process plays the control plane; SIGKILL it and its job must die too.
    job = f"j-dies-{os.getpid()}"
    script = f"""
import sys, time
sys.path.insert(0, {str(Path(__file__).resolve().parents[3] / "src")!r})
from gpu_platform.adapters.outbound.process import ProcessJobRunner
from gpu_platform.ports.outbound.job_runner import LaunchSpec
r = ProcessJobRunner({str(tmp_path)!r})
r.start(LaunchSpec({job!r}, 1, 1, ('sleep', '600'), (), (), ()), lambda rep: None)
print('started', flush=True)
time.sleep(600)
"""
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        for line in parent.stdout:  # structlog's default output may come first
            if line.strip() == "started":
                break
        marker = f"GPU_PLATFORM_ATTEMPT={job}:1".encode()
        children = [
            int(p.name)
            for p in Path("/proc").iterdir()
            if p.name.isdigit() and _marker(p) == marker
        ]
        assert len(children) == 1
    finally:
        parent.kill()
        parent.wait()
    assert wait_for(lambda: not alive(children[0]))


def _marker(proc: Path) -> bytes | None:
    try:
        env = (proc / "environ").read_bytes().split(b"\0")
    except OSError:
        return None
    return next((e for e in env if e.startswith(b"GPU_PLATFORM_ATTEMPT=")), None)


def test_visibility_masks_follow_the_vendor_and_the_naming_mode() -> None:
    from gpu_platform.adapters.outbound.process.runner import visibility_env

    nvidia = spec(("true",))
    assert visibility_env(nvidia)["CUDA_VISIBLE_DEVICES"] == "2,5"
    assert visibility_env(nvidia, "uuid")["NVIDIA_VISIBLE_DEVICES"] == "a,b"
    amd = visibility_env(spec(("true",), vendor="amd"))
    assert (
        amd["ROCR_VISIBLE_DEVICES"],
        amd["HIP_VISIBLE_DEVICES"],
        amd["CUDA_VISIBLE_DEVICES"],
    ) == ("2,5", "2,5", "")
    assert visibility_env(spec(("true",), vendor="intel"))["ZE_AFFINITY_MASK"] == "2,5"
    none = visibility_env(spec(("true",), gpu_indices=(), gpu_uuids=()))
    assert none["CUDA_VISIBLE_DEVICES"] == "" and none["NVIDIA_VISIBLE_DEVICES"] == "void"
    assert none["ROCR_VISIBLE_DEVICES"] == "" and none["ZE_AFFINITY_MASK"] == ""


def test_a_single_task_job_gets_torchrun_style_rank_variables(runner: ProcessJobRunner) -> None:
    code = "import os; print(*(os.environ[k] for k in ('RANK', 'LOCAL_RANK', 'WORLD_SIZE', 'MASTER_ADDR')), int(os.environ['MASTER_PORT']) > 0)"
    reports: list[ExitReport] = []
    runner.start(spec((sys.executable, "-c", code)), reports.append)
    assert wait_for(lambda: bool(reports))
    assert runner.read_log("j-1", 1, 1000) == "0 0 1 127.0.0.1 True\n"


def test_a_job_over_its_time_limit_is_stopped_and_reported_as_timed_out(
    runner: ProcessJobRunner,
) -> None:
    reports: list[ExitReport] = []
    runner.start(spec(("sleep", "600"), time_limit_s=0.3), reports.append)
    assert wait_for(lambda: bool(reports))
    assert reports[0].signal == signal.SIGTERM
    assert reports[0].reason == "time limit of 0.3s exceeded"


def test_the_log_is_capped_and_the_cut_is_marked(tmp_path: Path) -> None:
    r = ProcessJobRunner(tmp_path / "jobs", log_max_bytes=1000)
    try:
        reports: list[ExitReport] = []
        code = "import sys; sys.stdout.write('x' * 100000); print('tail')"
        r.start(spec((sys.executable, "-c", code)), reports.append)
        assert wait_for(lambda: bool(reports))
        assert reports[0].exit_code == 0  # the job was not blocked or killed by the cap
        text = r.read_log("j-1", 1, 1 << 20)
        assert text.startswith("x" * 1000) and "tail" not in text
        assert text.endswith("[gpu-platform: log truncated at 1000 bytes]\n")
    finally:
        r.close(grace_s=1)


def test_nccl_and_ucx_are_pointed_at_the_nearest_nics(runner: ProcessJobRunner) -> None:
    code = "import os; print(os.environ['NCCL_IB_HCA'], os.environ['UCX_NET_DEVICES'])"
    reports: list[ExitReport] = []
    runner.start(spec((sys.executable, "-c", code), nics=("mlx5_0", "mlx5_1")), reports.append)
    assert wait_for(lambda: bool(reports))
    assert runner.read_log("j-1", 1, 1000) == "mlx5_0,mlx5_1 mlx5_0:1,mlx5_1:1\n"


def test_an_unknown_user_fails_the_launch_with_the_reason(runner: ProcessJobRunner) -> None:
    with pytest.raises(LaunchError, match="no-such-user"):
        runner.start(spec(("true",), user="no-such-user"), lambda r: None)


def test_a_job_runs_as_the_user_it_asked_for(runner: ProcessJobRunner) -> None:
    import pwd

    from gpu_platform.testing.system import require

    require(os.geteuid() == 0, "running a job as another user needs root")
    nobody = pwd.getpwnam("nobody")
    reports: list[ExitReport] = []
    runner.start(spec(("sh", "-c", "id -u; id -g; id -G; pwd"), user="nobody"), reports.append)
    assert wait_for(lambda: bool(reports))
    uid, gid, groups, cwd = runner.read_log("j-1", 1, 1000).split("\n")[:4]
    assert (int(uid), int(gid), groups) == (nobody.pw_uid, nobody.pw_gid, str(nobody.pw_gid))
    assert cwd == str(runner.log_root / "j-1") and reports[0].exit_code == 0


def test_an_mps_client_gets_its_compute_share_and_pinned_memory_limit(
    runner: ProcessJobRunner,
) -> None:
    from gpu_platform.domain.allocation.mps import MpsShare

    share = MpsShare(job_id="j-1", active_thread_percentage=30, pinned_memory_bytes=3 << 30)
    code = "import os; print(os.environ['CUDA_MPS_ACTIVE_THREAD_PERCENTAGE'], os.environ['CUDA_MPS_PINNED_DEVICE_MEM_LIMIT'])"
    reports: list[ExitReport] = []
    runner.start(
        spec((sys.executable, "-c", code), gpu_indices=(2,), gpu_uuids=("a",), mps=share),
        reports.append,
    )
    assert wait_for(lambda: bool(reports))
    assert runner.read_log("j-1", 1, 1000) == "30 0=3072MB\n"


def test_a_gang_s_rank_zero_refuses_to_start_on_a_master_port_that_is_taken(
    runner: ProcessJobRunner,
) -> None:
    import socket

    from gpu_platform.ports.outbound.job_runner import GangEnv

    with socket.create_server(("", 0)) as taken:
        port = taken.getsockname()[1]
        gang = GangEnv(2, 0, 1, 0, "127.0.0.1", master_port=port)
        with pytest.raises(LaunchError, match=f"MASTER_PORT {port} is taken"):
            runner.start(spec(("true",), gang=gang), lambda _: None)
        # rank 1 only connects there: it is given the same port and starts
        reports: list[ExitReport] = []
        code = "import os; print(os.environ['MASTER_PORT'])"
        runner.start(spec((sys.executable, "-c", code), gang=gang, rank=1), reports.append)
        assert wait_for(lambda: bool(reports))
    assert runner.read_log("j-1", 1, 1000, rank=1) == f"{port}\n"
