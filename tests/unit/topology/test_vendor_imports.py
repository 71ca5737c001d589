"""amdsmi and pyzes fail at import time without their native libraries; the adapters must
turn that into an ABSENT capability (and keep amdsmi's stdout chatter off our stdout)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from gpu_platform.adapters.outbound.amdsmi import AmdSmiGpuDiscovery
from gpu_platform.adapters.outbound.levelzero import LevelZeroGpuDiscovery
from gpu_platform.adapters.outbound.sim.profiles import profile_topology
from gpu_platform.domain.model.telemetry import CapabilityStatus
from gpu_platform.testing.fake_amdsmi import FakeAmdSmi
from gpu_platform.testing.fake_pyzes import FakePyzes

AMDSMI_INIT = """\
print("/opt/rocm/lib/libamd_smi.so: cannot open shared object file: No such file or directory")
print("Unable to find libamd_smi.so library try installing amd-smi-lib from your package manager")
_libraries = {}
_libraries["libamd_smi.so"]
"""
PYZES_INIT = """\
raise OSError("/usr/lib/x86_64-linux-gnu/libze_loader.so.1: cannot open shared object file")
"""


@pytest.fixture
def broken_vendor_modules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, body in (("amdsmi", AMDSMI_INIT), ("pyzes", PYZES_INIT)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text(body)
        monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.syspath_prepend(str(tmp_path))


@pytest.mark.usefixtures("broken_vendor_modules")
def test_amdsmi_import_failure_is_absent_and_silent(capsys: pytest.CaptureFixture[str]) -> None:
    inv = AmdSmiGpuDiscovery(node="n").discover()
    (c,) = inv.capabilities
    assert c.status is CapabilityStatus.ABSENT
    assert "KeyError" in c.detail and "libamd_smi.so" in c.detail
    assert capsys.readouterr().out == ""
    assert inv.gpu_count == 0


@pytest.mark.usefixtures("broken_vendor_modules")
def test_pyzes_import_failure_is_absent() -> None:
    c = LevelZeroGpuDiscovery(node="n").capability()
    assert c.status is CapabilityStatus.ABSENT
    assert "OSError" in c.detail and "libze_loader" in c.detail


def test_amdsmi_without_the_driver_is_absent() -> None:
    fake = FakeAmdSmi(profile_topology("mixed-vendor"), driver_loaded=False)
    assert AmdSmiGpuDiscovery(fake).capability().status is CapabilityStatus.ABSENT


def test_amdsmi_reads_xgmi_links_numa_and_na_fields() -> None:
    fake = FakeAmdSmi(profile_topology("mixed-vendor"), power_na=True)
    adapter = AmdSmiGpuDiscovery(fake, node="m")
    topo = adapter.probe()
    assert [g.model for g in topo.gpus] == ["AMD Instinct MI210"] * 2
    assert [g.numa_node for g in topo.gpus] == [1, 1]
    (link,) = topo.links
    assert (link.kind.value, link.bandwidth_mbps) == ("xgmi", 100_000)
    snap = adapter.snapshot()
    assert [r.power_mw for r in snap.gpus] == [None, None]
    assert [r.temperature_c for r in snap.gpus] == [35, 35]


def test_amdsmi_not_supported_calls_become_capabilities() -> None:
    fake = FakeAmdSmi(
        profile_topology("mixed-vendor"), not_supported={("amdsmi_get_temp_metric", 1)}
    )
    snap = AmdSmiGpuDiscovery(fake, node="m").snapshot()
    assert [r.temperature_c for r in snap.gpus] == [35, None]
    (c,) = [c for c in snap.capabilities if c.name == "amdsmi.temperature"]
    assert (c.status, c.detail) == (CapabilityStatus.NOT_SUPPORTED, "GPU 1")


def test_level_zero_reads_pci_address_memory_and_numa_from_sysfs(tmp_path: Path) -> None:
    topo = profile_topology("mixed-vendor")
    intel = next(g for g in topo.gpus if g.vendor.value == "intel")
    d = tmp_path / "sys/bus/pci/devices" / intel.pci_bus_id
    d.mkdir(parents=True)
    (d / "numa_node").write_text("1\n")
    adapter = LevelZeroGpuDiscovery(FakePyzes(topo), node="m", sysfs_root=str(tmp_path))
    (gpu,) = adapter.discover().nodes[0].gpus
    assert (gpu.pci_bus_id, gpu.numa_node, gpu.memory_bytes) == (
        intel.pci_bus_id,
        1,
        intel.memory_bytes,
    )
    assert gpu.uuid.startswith("ZE-")


def test_level_zero_unsupported_enumerations_become_capabilities() -> None:
    fake = FakePyzes(profile_topology("mixed-vendor"), unsupported={"zesDeviceEnumMemoryModules"})
    inv = LevelZeroGpuDiscovery(fake, node="m").discover()
    assert inv.nodes[0].gpus[0].memory_bytes == 0
    (c,) = [c for c in inv.capabilities if c.name == "levelzero.memory"]
    assert c.status is CapabilityStatus.NOT_SUPPORTED


def test_level_zero_init_failure_is_absent() -> None:
    fake = FakePyzes(profile_topology("mixed-vendor"), initialises=False)
    assert LevelZeroGpuDiscovery(fake).discover().capabilities[0].status is CapabilityStatus.ABSENT
