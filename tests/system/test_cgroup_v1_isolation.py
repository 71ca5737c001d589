"""Real cgroup v1 isolation on this host (root, writable cpuset/memory/pids/devices).

Skips without them on a developer machine; fails in CI (GPU_PLATFORM_REQUIRE_SYSTEM_TESTS=1).
"""

from __future__ import annotations

import contextlib
import os
import stat
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gpu_platform.adapters.outbound.cgroups import CgroupV1Isolation, gpu_device_rules
from gpu_platform.adapters.outbound.process import ProcessJobRunner
from gpu_platform.ports.outbound.isolation import IsolationError, IsolationSpec
from gpu_platform.ports.outbound.job_runner import ExitReport, LaunchError, LaunchSpec
from gpu_platform.testing.system import require

ROOT = Path("/sys/fs/cgroup")


def writable(controller: str) -> bool:
    return (
        (ROOT / controller).is_dir() and os.access(ROOT / controller, os.W_OK) and os.geteuid() == 0
    )


@pytest.fixture
def isolation() -> Iterator[CgroupV1Isolation]:
    for controller in ("cpuset", "memory", "pids", "devices"):
        require(
            writable(controller), f"cgroup v1 '{controller}' hierarchy not writable (needs root)"
        )
    iso = CgroupV1Isolation(ROOT, prefix=f"gpu-platform-test/{uuid.uuid4().hex[:8]}")
    yield iso
    iso.sweep()
    for controller in iso.controllers:
        for level in (ROOT / controller / iso.prefix, (ROOT / controller / iso.prefix).parent):
            with contextlib.suppress(OSError):
                level.rmdir()


@pytest.fixture
def runner(isolation: CgroupV1Isolation, tmp_path: Path) -> Iterator[ProcessJobRunner]:
    r = ProcessJobRunner(tmp_path / "jobs", isolation=isolation, device_majors={})
    yield r
    r.close(grace_s=1)


def run(runner: ProcessJobRunner, code: str, **kw: object) -> tuple[ExitReport, str]:
    spec = LaunchSpec(
        **{  # type: ignore[arg-type]
            "job_id": f"j-{uuid.uuid4().hex[:6]}",
            "epoch": 1,
            "attempt": 1,
            "argv": (sys.executable, "-c", code),
            "env": (),
            "gpu_indices": (0,),
            "gpu_uuids": ("GPU-0",),
            **kw,
        }
    )
    reports: list[ExitReport] = []
    runner.start(spec, reports.append)
    assert wait_for(lambda: bool(reports), 20)
    return reports[0], runner.read_log(spec.job_id, 1, 1 << 16)


def wait_for(cond: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not cond():
        time.sleep(0.02)
    return cond()


def test_a_job_pinned_to_cpu_0_sees_only_cpu_0(runner: ProcessJobRunner) -> None:
    report, out = run(
        runner, "import os; print(sorted(os.sched_getaffinity(0)))", cpus=(0,), mems=(0,)
    )
    assert report.exit_code == 0, out
    assert out.strip() == "[0]"


def test_an_unpinned_job_sees_every_cpu_of_the_host(runner: ProcessJobRunner) -> None:
    report, out = run(runner, "import os; print(len(os.sched_getaffinity(0)))")
    assert report.exit_code == 0 and int(out) == len(os.sched_getaffinity(0))


def test_a_job_cannot_open_a_gpu_device_it_was_not_given(
    runner: ProcessJobRunner, tmp_path: Path
) -> None:
    # Two NVIDIA-style device nodes: the job holds GPU 0 (195:0), not GPU 3 (195:3).
    mine, other = tmp_path / "nvidia0", tmp_path / "nvidia3"
    os.mknod(mine, 0o666 | stat.S_IFCHR, os.makedev(195, 0))
    os.mknod(other, 0o666 | stat.S_IFCHR, os.makedev(195, 3))
    code = f"""
import errno
for path in ({str(mine)!r}, {str(other)!r}):
    try:
        open(path, "rb").close()
        print(path, "opened")
    except OSError as exc:
        print(path, errno.errorcode[exc.errno])
"""
    _report, out = run(runner, code, gpu_indices=(0,))
    lines = dict(line.split() for line in out.splitlines())
    assert lines[str(other)] == "EPERM", out  # denied by the devices cgroup
    assert lines[str(mine)] != "EPERM", out  # allowed (no driver here, so ENXIO/ENODEV)


def test_the_memory_cap_is_enforced(runner: ProcessJobRunner) -> None:
    code = "b = bytearray(256 << 20); print('allocated', flush=True)"
    report, out = run(runner, code, memory_bytes=64 << 20)
    assert "allocated" not in out
    assert report.exit_code != 0  # killed by the OOM killer (SIGKILL) or MemoryError


def test_the_job_runs_inside_its_own_cgroups_which_vanish_after_it_ends(
    runner: ProcessJobRunner, isolation: CgroupV1Isolation
) -> None:
    report, out = run(runner, "print(open('/proc/self/cgroup').read())")
    assert report.exit_code == 0
    groups = {line.split(":")[1]: line.split(":")[2] for line in out.splitlines() if line}
    for controller in ("cpuset", "memory", "pids", "devices"):
        assert groups[controller].startswith(f"/{isolation.prefix}/j-"), out
    for controller in isolation.controllers:
        base = ROOT / controller / isolation.prefix
        assert not any(p.is_dir() for p in base.iterdir()), list(base.iterdir())


def test_pinning_to_a_cpu_the_host_lacks_fails_the_launch_with_the_reason(
    runner: ProcessJobRunner,
) -> None:
    spec = LaunchSpec("j-bad", 1, 1, ("true",), (), (), (), cpus=(4096,))
    with pytest.raises(LaunchError, match=r"cannot pin to CPUs \[4096\]"):
        runner.start(spec, lambda r: None)


def test_sweep_kills_and_removes_what_a_crashed_run_left(isolation: CgroupV1Isolation) -> None:
    import subprocess

    joins = isolation.prepare(
        IsolationSpec("j-left.1", devices=gpu_device_rules("nvidia", (0,), {}))
    )
    proc = subprocess.Popen(["sleep", "600"])
    for path in joins:
        Path(path).write_text(str(proc.pid))
    assert isolation.sweep() == ["j-left.1"]
    assert proc.wait(timeout=10) == -9
    for path in joins:
        assert not Path(path).parent.exists()


def test_a_v1_hierarchy_that_does_not_exist_is_refused(tmp_path: Path) -> None:
    with pytest.raises(IsolationError, match="no cgroup v1 hierarchy"):
        CgroupV1Isolation(tmp_path)
