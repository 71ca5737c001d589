"""Isolation adapters on fake cgroup trees (plain directories), device rules, detection."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpu_platform.adapters.outbound.cgroups import (
    CgroupV1Isolation,
    CgroupV2Isolation,
    NoopIsolation,
    detect_isolation,
    gpu_device_rules,
)
from gpu_platform.adapters.outbound.cgroups.devices import proc_devices
from gpu_platform.ports.outbound.isolation import (
    DeviceRule,
    Isolation,
    IsolationError,
    IsolationSpec,
)


def fake_v2(tmp_path: Path, controllers: str = "cpuset cpu memory pids") -> Path:
    (tmp_path / "cgroup.controllers").write_text(controllers + "\n")
    (tmp_path / "cgroup.subtree_control").write_text("")
    return tmp_path


def test_every_adapter_satisfies_the_port(tmp_path: Path) -> None:
    assert isinstance(NoopIsolation(), Isolation)
    assert isinstance(CgroupV2Isolation(fake_v2(tmp_path)), Isolation)


def test_v2_writes_the_limits_and_returns_the_procs_file(tmp_path: Path) -> None:
    iso = CgroupV2Isolation(fake_v2(tmp_path))
    joins = iso.prepare(
        IsolationSpec("j-1.1", cpus=(0, 2, 3), mems=(1,), memory_bytes=1 << 30, pids_max=64)
    )
    group = tmp_path / "gpu-platform" / "j-1.1"
    assert joins == (str(group / "cgroup.procs"),)
    assert (group / "cpuset.cpus").read_text() == "0,2,3"
    assert (group / "cpuset.mems").read_text() == "1"
    assert (group / "memory.max").read_text() == str(1 << 30)
    assert (group / "pids.max").read_text() == "64"
    assert (
        tmp_path / "gpu-platform" / "cgroup.subtree_control"
    ).read_text() == "+cpuset +memory +pids"


def test_v2_refuses_pinning_without_the_cpuset_controller(tmp_path: Path) -> None:
    iso = CgroupV2Isolation(fake_v2(tmp_path, "memory pids"))
    with pytest.raises(IsolationError, match="cpuset"):
        iso.prepare(IsolationSpec("j-1.1", cpus=(0,)))
    assert not (tmp_path / "gpu-platform" / "j-1.1").exists()


def test_v2_says_it_cannot_filter_devices(tmp_path: Path) -> None:
    iso = CgroupV2Isolation(fake_v2(tmp_path))
    iso.prepare(IsolationSpec("j-1.1", devices=(DeviceRule("c", 195, 0),)))
    assert "device allow-list not enforced" in iso.limitations[0]


def test_v2_on_a_non_v2_tree_is_refused(tmp_path: Path) -> None:
    with pytest.raises(IsolationError, match="not a cgroup v2 hierarchy"):
        CgroupV2Isolation(tmp_path)


def test_v1_uses_only_the_hierarchies_present(tmp_path: Path) -> None:
    (tmp_path / "pids").mkdir()
    assert CgroupV1Isolation(tmp_path).controllers == ("pids",)


def test_nvidia_rules_allow_the_given_gpus_and_the_control_nodes_only() -> None:
    rules = gpu_device_rules("nvidia", (1, 3), {"nvidia-uvm": 509})
    lines = {r.v1() for r in rules}
    assert lines == {"c 195:1 rwm", "c 195:3 rwm", "c 195:255 rwm", "c 195:254 rwm", "c 509:* rwm"}


def test_amd_rules_allow_card_render_and_kfd() -> None:
    lines = {r.v1() for r in gpu_device_rules("amd", (0,), {"kfd": 235})}
    assert lines == {"c 226:0 rwm", "c 226:128 rwm", "c 235:* rwm"}


def test_a_job_without_gpus_gets_no_gpu_device() -> None:
    assert gpu_device_rules("nvidia", (), {}) == ()


def test_proc_devices_reads_character_majors_only(tmp_path: Path) -> None:
    path = tmp_path / "devices"
    path.write_text(
        "Character devices:\n  1 mem\n195 nvidia\n509 nvidia-uvm\n\nBlock devices:\n  8 sd\n"
    )
    assert proc_devices(path) == {"mem": 1, "nvidia": 195, "nvidia-uvm": 509}
    assert proc_devices(tmp_path / "missing") == {}


def test_detect_honours_an_explicit_none_and_falls_back_to_none_on_a_bare_host(
    tmp_path: Path,
) -> None:
    assert isinstance(detect_isolation("none"), NoopIsolation)
    assert isinstance(detect_isolation("auto", tmp_path), NoopIsolation)


def test_detect_prefers_a_usable_unified_hierarchy(tmp_path: Path) -> None:
    assert isinstance(detect_isolation("auto", fake_v2(tmp_path)), CgroupV2Isolation)


def test_detect_refuses_an_explicit_choice_the_host_lacks(tmp_path: Path) -> None:
    with pytest.raises(IsolationError):
        detect_isolation("cgroup-v2", tmp_path)
