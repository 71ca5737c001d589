"""SystemdScopeIsolation: the properties it asks systemd for, and the runner wiring.

There is no systemd on this machine (no PID-1 systemd in containers), so `systemd-run` and
`systemctl` are stand-ins that record their argv: `systemd-run` then execs the job the way the
real one does after moving itself into the scope. What is tested is our side of the contract —
the exact `DeviceAllow=`/`AllowedCPUs=`/`MemoryMax=` properties, the argv order, the user
switch, stop and sweep — not systemd's eBPF device filter itself.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpu_platform.adapters.outbound.cgroups import SystemdScopeIsolation, detect_isolation
from gpu_platform.adapters.outbound.cgroups.systemd import device_allow
from gpu_platform.adapters.outbound.process import ProcessJobRunner
from gpu_platform.ports.outbound.isolation import (
    DeviceRule,
    Isolation,
    IsolationError,
    IsolationSpec,
    WrapsCommand,
)
from gpu_platform.ports.outbound.job_runner import ExitReport, LaunchSpec

MAJORS = {"nvidia-uvm": 510, "nvidia-caps": 235}

SYSTEMD_RUN = f"""#!{sys.executable}
import json, os, sys
with open(os.environ["FAKE_SYSTEMD_LOG"], "a") as f:
    f.write(json.dumps(["systemd-run", *sys.argv[1:]]) + "\\n")
rest = sys.argv[sys.argv.index("--") + 1:]
os.execvp(rest[0], rest)
"""

SYSTEMCTL = f"""#!{sys.executable}
import json, os, sys
with open(os.environ["FAKE_SYSTEMD_LOG"], "a") as f:
    f.write(json.dumps(["systemctl", *sys.argv[1:]]) + "\\n")
if sys.argv[1] == "list-units":
    print(os.environ.get("FAKE_UNITS", ""))
if sys.argv[1] == "stop" and sys.argv[2].startswith("missing"):
    sys.exit(5)
"""


@pytest.fixture
def tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("systemd-run", SYSTEMD_RUN), ("systemctl", SYSTEMCTL)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    log = tmp_path / "systemd.log"
    monkeypatch.setenv("FAKE_SYSTEMD_LOG", str(log))
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    return log


def calls(log: Path) -> list[list[str]]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines()]


def test_it_is_an_isolation_that_wraps_the_command(tools: Path) -> None:
    scopes = SystemdScopeIsolation(majors=MAJORS)
    assert isinstance(scopes, Isolation)
    assert isinstance(scopes, WrapsCommand)


def test_without_systemd_tools_it_refuses_with_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(IsolationError, match="systemd-run not found"):
        SystemdScopeIsolation(majors=MAJORS)


def test_device_rules_become_device_allow_entries() -> None:
    assert device_allow(DeviceRule("c", 195, 3), MAJORS) == "/dev/char/195:3 rwm"
    assert device_allow(DeviceRule("c", 510, None), MAJORS) == "char-nvidia-uvm rwm"
    with pytest.raises(IsolationError, match="major 77"):
        device_allow(DeviceRule("c", 77, None), MAJORS)


def test_the_prefix_carries_every_limit_and_the_closed_device_policy(tools: Path) -> None:
    scopes = SystemdScopeIsolation(majors=MAJORS)
    scopes.use_prefix("gpu-platform/abc")
    rules = (DeviceRule("c", 195, 2), DeviceRule("c", 195, 255), DeviceRule("c", 510, None))
    spec = IsolationSpec("j-1.7", (0, 1, 2), (0,), 1 << 30, 64, rules)
    assert scopes.prepare(spec) == ()
    argv = scopes.command_prefix("j-1.7", 1000, 1000)
    assert argv[:5] == (
        "systemd-run",
        "--scope",
        "--quiet",
        "--collect",
        "--unit=gpu-platform-abc-j-1.7.scope",
    )
    assert argv[-1] == "--"
    props = [argv[i + 1] for i, a in enumerate(argv) if a == "-p"]
    assert props == [
        "AllowedCPUs=0,1,2",
        "AllowedMemoryNodes=0",
        f"MemoryMax={1 << 30}",
        "TasksMax=64",
        "DevicePolicy=closed",
        "DeviceAllow=/dev/char/195:2 rwm",
        "DeviceAllow=/dev/char/195:255 rwm",
        "DeviceAllow=char-nvidia-uvm rwm",
    ]
    assert "--uid=1000" in argv and "--gid=1000" in argv


def test_no_device_list_means_no_device_policy(tools: Path) -> None:
    scopes = SystemdScopeIsolation(majors=MAJORS)
    scopes.prepare(IsolationSpec("j-2.1"))
    argv = scopes.command_prefix("j-2.1", None, None)
    assert not any("Device" in a for a in argv)
    assert not any(a.startswith("--uid") for a in argv)


def test_release_stops_the_scope_and_tolerates_a_gone_one(tools: Path) -> None:
    scopes = SystemdScopeIsolation(majors=MAJORS)
    scopes.release("j-1.7")
    scopes.use_prefix("missing")
    scopes.release("j-1.7")  # exit 5: not loaded, already gone
    assert calls(tools) == [
        ["systemctl", "stop", "gpu-platform-j-1.7.scope"],
        ["systemctl", "stop", "missing-j-1.7.scope"],
    ]


def test_sweep_stops_every_scope_an_earlier_life_left(
    tools: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(
        "FAKE_UNITS",
        "gpu-platform-a.1.scope loaded active running x\n"
        "gpu-platform-b.2.scope loaded active running y",
    )
    scopes = SystemdScopeIsolation(majors=MAJORS)
    assert scopes.sweep() == ["gpu-platform-a.1.scope", "gpu-platform-b.2.scope"]
    assert calls(tools)[0][:2] == ["systemctl", "list-units"]
    assert calls(tools)[1:] == [
        ["systemctl", "stop", "gpu-platform-a.1.scope"],
        ["systemctl", "stop", "gpu-platform-b.2.scope"],
    ]


def test_detect_picks_scopes_on_a_systemd_cgroup_v2_host_and_refuses_without_systemd(
    tools: Path, tmp_path: Path
) -> None:
    root = tmp_path / "cg"
    root.mkdir()
    (root / "cgroup.controllers").write_text("cpuset memory pids\n")
    run_dir = tmp_path / "run-systemd"
    run_dir.mkdir()
    if os.geteuid() == 0:
        assert isinstance(detect_isolation("auto", root, run_dir), SystemdScopeIsolation)
    with pytest.raises(IsolationError, match="systemd is not running"):
        detect_isolation("systemd", root, tmp_path / "absent")


@pytest.fixture
def runner(tools: Path, tmp_path: Path) -> Iterator[ProcessJobRunner]:
    scopes = SystemdScopeIsolation(majors=MAJORS)
    r = ProcessJobRunner(
        tmp_path / "jobs",
        base_env={"PATH": os.environ["PATH"], "FAKE_SYSTEMD_LOG": str(tools)},
        isolation=scopes,
        device_majors={"nvidia-uvm": 510},
    )
    yield r
    r.close(grace_s=1)


def test_the_runner_starts_the_job_inside_its_scope_with_only_its_gpus(
    runner: ProcessJobRunner, tools: Path
) -> None:
    reports: list[ExitReport] = []
    spec = LaunchSpec(
        job_id="j-9",
        epoch=4,
        attempt=1,
        argv=(sys.executable, "-c", "import os; print(os.environ['CUDA_VISIBLE_DEVICES'])"),
        env=(),
        gpu_indices=(2, 5),
        gpu_uuids=("GPU-a", "GPU-b"),
        cpus=(0,),
        mems=(0,),
    )
    runner.start(spec, reports.append)
    deadline = time.monotonic() + 20
    while not reports and time.monotonic() < deadline:
        time.sleep(0.05)
    assert reports and reports[0].exit_code == 0
    assert runner.read_log("j-9", 1, 100) == "2,5\n"
    run = next(c for c in calls(tools) if c[0] == "systemd-run")
    assert "--unit=gpu-platform-j-9.4.scope" in run
    allowed = [a for a in run if a.startswith("DeviceAllow=")]
    assert allowed == [
        "DeviceAllow=/dev/char/195:2 rwm",
        "DeviceAllow=/dev/char/195:5 rwm",
        "DeviceAllow=/dev/char/195:255 rwm",
        "DeviceAllow=/dev/char/195:254 rwm",
        "DeviceAllow=char-nvidia-uvm rwm",
    ]
    assert "AllowedCPUs=0" in run and "DevicePolicy=closed" in run
    assert run[run.index("--") + 1] == sys.executable  # the job itself follows the wrapper
    assert ["systemctl", "stop", "gpu-platform-j-9.4.scope"] in calls(tools)  # released
