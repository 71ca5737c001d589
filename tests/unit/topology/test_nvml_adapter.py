"""The NVML adapter's real code paths, run against the fake pynvml."""

from __future__ import annotations

import pytest

from gpu_platform.adapters.outbound.nvml import NvmlGpuDiscovery
from gpu_platform.adapters.outbound.sim.profiles import profile_topology
from gpu_platform.domain.model.telemetry import CapabilityStatus, RemappedRows
from gpu_platform.domain.model.topology import LinkLevel
from gpu_platform.domain.topology import build_matrix
from gpu_platform.testing.fake_pynvml import FakePynvml
from gpu_platform.testing.topology_builders import pairwise_topology


def cap(caps: tuple, name: str) -> tuple[CapabilityStatus, str]:
    (found,) = [c for c in caps if c.name == name]
    return found.status, found.detail


def test_nvlink_through_nvswitches_reads_as_nv12_on_a_dgx_a100() -> None:
    fake = FakePynvml(profile_topology("dgx-a100"))
    topo = NvmlGpuDiscovery(fake, node="n").probe()
    assert len(topo.nvswitches) == 6
    m = build_matrix(topo)
    assert {m.cell(a, b).label for a in range(8) for b in range(8) if a != b} == {"NV12"}
    assert fake.initialised == 0  # every session shuts NVML down again


def test_common_ancestor_levels_come_from_nvml() -> None:
    topo = NvmlGpuDiscovery(FakePynvml(profile_topology("hgx-8x-pcie")), node="n").probe()
    m = build_matrix(topo)
    assert m.cell(0, 3).level is LinkLevel.PIX
    assert m.cell(0, 4).level is LinkLevel.SYS
    assert len(topo.measured_levels) == 28


def test_direct_nvlink_bridges_are_counted_once_per_pair() -> None:
    topo = pairwise_topology("p", 4, {}, nvlinks={(0, 1): 4, (2, 3): 2})
    probed = NvmlGpuDiscovery(FakePynvml(topo), node="p").probe()
    m = build_matrix(probed)
    assert (m.cell(0, 1).label, m.cell(2, 3).label, m.cell(0, 2).label) == ("NV4", "NV2", "SYS")


def test_identity_memory_and_affinity_fill_the_inventory() -> None:
    fake = FakePynvml(profile_topology("dgx-a100", "n"))
    inv = NvmlGpuDiscovery(fake, node="n", cpu_count=128).discover()
    g = inv.nodes[0].gpus[5]
    site = fake.gpus[5]
    assert (g.uuid, g.pci_bus_id, g.memory_bytes, g.numa_node) == (
        site.uuid,
        site.pci_bus_id,
        80 << 30,
        1,
    )
    assert g.model == "NVIDIA A100-SXM4-80GB"
    assert inv.nodes[0].topology is not None
    assert inv.nodes[0].topology.gpu(5).cpus == tuple(range(64, 128))


def test_unsupported_calls_become_capabilities_and_none_readings() -> None:
    fake = FakePynvml(
        profile_topology("dgx-a100"),
        not_supported={("nvmlDeviceGetPowerUsage", 2), "nvmlDeviceGetTotalEccErrors"},
    )
    snap = NvmlGpuDiscovery(fake, node="n").snapshot()
    assert snap.gpus[2].power_mw is None
    assert snap.gpus[1].power_mw == 60_000
    assert all(r.ecc_corrected is None and r.ecc_uncorrected is None for r in snap.gpus)
    assert cap(snap.capabilities, "nvml.power") == (CapabilityStatus.NOT_SUPPORTED, "GPU 2")
    assert cap(snap.capabilities, "nvml.ecc")[0] is CapabilityStatus.NOT_SUPPORTED


def test_mig_mode_refuses_utilization_and_remapped_rows_but_lists_profiles() -> None:
    fake = FakePynvml(profile_topology("dgx-a100"))
    fake.state[0].mig = True
    snap = NvmlGpuDiscovery(fake, node="n").snapshot()
    r = snap.gpus[0]
    assert (r.mig_enabled, r.utilization_pct, r.remapped_rows) == (True, None, None)
    assert "1g.10gb (id 19)" in r.mig_profiles and "7g.80gb (id 0)" in r.mig_profiles
    assert snap.gpus[1].mig_enabled is False
    assert snap.gpus[1].remapped_rows == RemappedRows(0, 0, False, False)
    assert cap(snap.capabilities, "nvml.utilization") == (CapabilityStatus.NOT_SUPPORTED, "GPU 0")


def test_telemetry_follows_the_hardware_state() -> None:
    fake = FakePynvml(profile_topology("dgx-h100"))
    fake.state[3].utilization = 87
    fake.state[3].clock_reasons = 0x4 | 0x40
    fake.state[3].remapped = (2, 1, 1, 0)
    fake.state[3].ecc_uncorrected = 3
    r = NvmlGpuDiscovery(fake, node="n").snapshot().gpus[3]
    assert r.utilization_pct == 87
    assert r.clock_event_reasons == ("sw_power_cap", "hw_thermal_slowdown")
    assert r.remapped_rows == RemappedRows(2, 1, True, False)
    assert r.ecc_uncorrected == 3


def test_memory_used_leaves_out_what_the_driver_reserves_as_nvidia_smi_does() -> None:
    # An idle H200 (driver 580): NVML v1 said 615 MiB used, nvidia-smi (v2) 0 MiB.
    fake = FakePynvml(profile_topology("dgx-h100"))
    fake.state[0].memory_reserved = 615 << 20
    fake.state[1].memory_reserved, fake.state[1].memory_used = 615 << 20, 4 << 30
    gpus = NvmlGpuDiscovery(fake, node="n").snapshot().gpus
    assert gpus[0].memory_used_bytes == 0
    assert gpus[1].memory_used_bytes == 4 << 30
    assert gpus[0].memory_total_bytes == profile_topology("dgx-h100").gpus[0].memory_bytes


def test_a_binding_without_the_v2_memory_call_reads_v1() -> None:
    fake = FakePynvml(profile_topology("dgx-h100"))
    fake.state[0].memory_reserved = 615 << 20
    del FakePynvml.nvmlMemory_v2  # an older nvidia-ml-py: no v2 structure
    try:
        assert NvmlGpuDiscovery(fake, node="n").snapshot().gpus[0].memory_used_bytes == 615 << 20
    finally:
        FakePynvml.nvmlMemory_v2 = 0x02000028


def test_a_lost_gpu_degrades_the_capability_without_crashing() -> None:
    fake = FakePynvml(profile_topology("dgx-a100"), lost={4})
    adapter = NvmlGpuDiscovery(fake, node="n")
    snap = adapter.snapshot()
    assert snap.gpus[4].temperature_c is None and snap.gpus[3].temperature_c == 30
    status, detail = cap(snap.capabilities, "nvml.temperature")
    assert status is CapabilityStatus.DEGRADED and "GPU 4: GPU is lost" in detail
    assert len(adapter.discover().nodes[0].gpus) == 8


def test_a_missing_library_is_reported_absent_not_raised() -> None:
    adapter = NvmlGpuDiscovery(FakePynvml(profile_topology("dgx-a100"), library_present=False))
    assert adapter.capability().status is CapabilityStatus.ABSENT
    inv = adapter.discover()
    assert inv.gpu_count == 0
    assert "NVML Shared Library Not Found" in inv.notes[0]
    assert adapter.snapshot().gpus == ()


def test_the_fake_only_offers_functions_and_constants_real_pynvml_has() -> None:
    pynvml = pytest.importorskip("pynvml")
    public = [n for n in vars(FakePynvml) if n.startswith(("nvml", "NVML"))]
    missing = [n for n in public if not hasattr(pynvml, n)]
    assert missing == []
    for name in ("NVML_TOPOLOGY_SINGLE", "NVML_NVLINK_DEVICE_TYPE_SWITCH", "NVML_CLOCK_SM"):
        assert getattr(FakePynvml, name) == getattr(pynvml, name)


def test_real_pynvml_without_a_driver_reports_absent() -> None:
    pytest.importorskip("pynvml")
    cap_ = NvmlGpuDiscovery().capability()
    if cap_.ok:
        pytest.skip("this machine has an NVIDIA driver")
    assert cap_.status is CapabilityStatus.ABSENT


class OldPynvml:
    """A pynvml from before row remapping and clock-event reasons existed."""

    gone = ("nvmlDeviceGetRemappedRows", "nvmlDeviceGetCurrentClocksEventReasons")

    def __init__(self, inner: FakePynvml) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> object:
        if name in self.gone or name == "nvmlDeviceGetCurrentClocksThrottleReasons":
            raise AttributeError(name)
        return getattr(self._inner, name)


def test_an_older_pynvml_without_newer_functions_reports_them_not_supported() -> None:
    snap = NvmlGpuDiscovery(
        OldPynvml(FakePynvml(profile_topology("dgx-a100"))), node="n"
    ).snapshot()
    assert all(r.remapped_rows is None and r.clock_event_reasons is None for r in snap.gpus)
    assert all(r.temperature_c == 30 for r in snap.gpus)
    assert cap(snap.capabilities, "nvml.remapped_rows")[0] is CapabilityStatus.NOT_SUPPORTED
    assert cap(snap.capabilities, "nvml.clock_event_reasons")[0] is CapabilityStatus.NOT_SUPPORTED
