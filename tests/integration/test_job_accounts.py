"""Jobs run as an unprivileged account in their own PID namespace (ProcessJobRunner with the
agent's defaults: `job_user` nobody, `job_pid_namespace` on), with real processes as root."""

from __future__ import annotations

import os
import pwd
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gpu_platform.adapters.outbound.process import ProcessJobRunner
from gpu_platform.ports.outbound.job_runner import ExitReport, LaunchError, LaunchSpec
from gpu_platform.testing.system import require

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="switching accounts needs root")


def world_python() -> str:
    """A Python interpreter any account may run (this one may lie under /root, mode 0700)."""
    for path in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if os.access(path, os.X_OK) and os.stat(path).st_mode & 0o001:
            return path
    pytest.skip("no world-executable python3 for the job")


def wait_for(cond: Callable[[], bool], timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not cond():
        time.sleep(0.02)
    return cond()


def spec(job_id: str, argv: tuple[str, ...], **kw: object) -> LaunchSpec:
    base: dict[str, object] = dict(
        job_id=job_id, epoch=1, attempt=1, argv=argv, env=(), gpu_indices=(), gpu_uuids=()
    )
    base.update(kw)
    return LaunchSpec(**base)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    data = tmp_path_factory.mktemp("node-data")
    (data / "admin-token").write_text("gpa_secret\n")
    return data


@pytest.fixture(scope="module")
def runner(data_dir: Path) -> Iterator[ProcessJobRunner]:
    require(os.geteuid() == 0, "switching accounts needs root")
    r = ProcessJobRunner(
        data_dir / "jobs",
        base_env={"PATH": os.environ["PATH"]},
        default_user="nobody",
        pid_namespace=True,
        protected=(data_dir,),
    )
    try:
        require(r.pid_namespace, "this host does not let the runner unshare a PID namespace")
        yield r
    finally:
        r.close(grace_s=1)


def run(runner: ProcessJobRunner, job: LaunchSpec) -> tuple[ExitReport, str]:
    reports: list[ExitReport] = []
    runner.start(job, reports.append)
    assert wait_for(lambda: bool(reports))
    return reports[0], runner.read_log(job.job_id, 1, 10_000)


def test_a_job_naming_no_account_runs_as_the_default_account_not_root(
    runner: ProcessJobRunner,
) -> None:
    report, out = run(runner, spec("j-who", ("sh", "-c", "id -u; id -G")))
    nobody = pwd.getpwnam("nobody")
    assert out.split() == [str(nobody.pw_uid), str(nobody.pw_gid)]
    assert report.exit_code == 0


def test_a_job_sees_only_its_own_processes_and_not_another_jobs_environment(
    runner: ProcessJobRunner,
) -> None:
    victim = spec(
        "j-victim", ("sleep", "60"), env=(("WANDB_API_KEY", "victim-secret"),), user="nobody"
    )
    reports: list[ExitReport] = []
    runner.start(victim, reports.append)
    hosts = [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()]
    spy = (
        "import os\n"
        "pids = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())\n"
        "print('pids', pids)\n"
        f"for pid in set(pids) | set({hosts!r}):\n"
        "    try:\n"
        "        data = open(f'/proc/{pid}/environ', 'rb').read()\n"
        "    except OSError as exc:\n"
        "        continue\n"
        "    print('LEAK' if b'victim-secret' in data else 'read', pid)\n"
    )
    report, out = run(runner, spec("j-spy", (world_python(), "-c", spy)))
    runner.stop("j-victim", 1, grace_s=0)
    assert wait_for(lambda: bool(reports))
    assert report.exit_code == 0, out
    assert "LEAK" not in out
    assert out.splitlines()[0] == "pids [1, 2]"  # its init and itself, nothing else


def test_the_job_exit_code_and_its_signal_come_through_the_namespace(
    runner: ProcessJobRunner,
) -> None:
    report, _ = run(runner, spec("j-code", ("sh", "-c", "exit 3")))
    assert (report.exit_code, report.signal) == (3, None)
    reports: list[ExitReport] = []
    runner.start(spec("j-term", ("sleep", "60")), reports.append)
    runner.stop("j-term", 1, grace_s=5)
    assert wait_for(lambda: bool(reports))
    assert (reports[0].exit_code, reports[0].signal) == (None, 15)  # SIGTERM, not the kill


def test_the_node_data_directory_is_refused_as_a_working_directory(
    runner: ProcessJobRunner, data_dir: Path
) -> None:
    for cwd in (str(data_dir), str(data_dir / "jobs"), str(data_dir / "jobs" / ".." / "jobs")):
        with pytest.raises(LaunchError, match="permission denied"):
            runner.start(spec("j-cwd", ("true",), cwd=cwd), lambda r: None)


def test_a_working_directory_the_account_may_not_use_fails_with_permission_denied(
    runner: ProcessJobRunner, tmp_path: Path
) -> None:
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    report, out = run(runner, spec("j-priv", ("true",), cwd=str(private)))
    assert report.exit_code == 126
    assert "Permission denied" in out
