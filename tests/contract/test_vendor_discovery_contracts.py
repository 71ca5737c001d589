"""GpuDiscovery and GpuTelemetry contracts, run against every adapter and fake."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpu_platform.adapters.outbound.amdsmi import AmdSmiGpuDiscovery
from gpu_platform.adapters.outbound.discovery import JoinedDiscovery, LocalityProbe, detect
from gpu_platform.adapters.outbound.levelzero import LevelZeroGpuDiscovery
from gpu_platform.adapters.outbound.nvml import NvmlGpuDiscovery
from gpu_platform.adapters.outbound.sim.profiles import ProfileGpuDiscovery, profile_topology
from gpu_platform.adapters.outbound.sysfs import SysfsGpuDiscovery, SysfsTopologyProbe
from gpu_platform.testing.contracts import GpuDiscoveryContract, GpuTelemetryContract
from gpu_platform.testing.fake_amdsmi import FakeAmdSmi
from gpu_platform.testing.fake_pynvml import FakePynvml
from gpu_platform.testing.fake_pyzes import FakePyzes
from gpu_platform.testing.fake_sysfs import two_socket_gpu_host
from gpu_platform.testing.system import require_shared
from tests.contract._made import Made

MIXED = profile_topology("mixed-vendor", "mixed")
A100 = profile_topology("dgx-a100", "a100")


class TestNvmlOnFakePynvml(Made, GpuDiscoveryContract, GpuTelemetryContract):
    def make(self) -> Any:
        return NvmlGpuDiscovery(FakePynvml(A100), node="a100", cpu_count=128)


class TestNvmlOnFakePynvmlWithUnsupportedCalls(Made, GpuDiscoveryContract, GpuTelemetryContract):
    def make(self) -> Any:
        calls = {
            "nvmlDeviceGetUtilizationRates",
            "nvmlDeviceGetTemperatureV",
            "nvmlDeviceGetTopologyCommonAncestor",
            "nvmlDeviceGetMemoryAffinity",
            "nvmlDeviceGetNvLinkState",
        }
        return NvmlGpuDiscovery(FakePynvml(A100, not_supported=calls), node="a100")


class TestNvmlWithoutItsLibrary(Made, GpuDiscoveryContract, GpuTelemetryContract):
    def make(self) -> Any:
        return NvmlGpuDiscovery(FakePynvml(A100, library_present=False), node="a100")


class TestNvmlForRealOnThisMachine(Made, GpuDiscoveryContract, GpuTelemetryContract):
    def make(self) -> Any:
        return NvmlGpuDiscovery()


class TestAmdSmiOnFakeAmdSmi(Made, GpuDiscoveryContract, GpuTelemetryContract):
    def make(self) -> Any:
        return AmdSmiGpuDiscovery(FakeAmdSmi(MIXED, power_na=True), node="mixed")


class TestAmdSmiForRealOnThisMachine(Made, GpuDiscoveryContract, GpuTelemetryContract):
    def make(self) -> Any:
        return AmdSmiGpuDiscovery()


class TestLevelZeroOnFakePyzes(Made, GpuDiscoveryContract, GpuTelemetryContract):
    def make(self) -> Any:
        return LevelZeroGpuDiscovery(FakePyzes(MIXED), node="mixed")


class TestLevelZeroForRealOnThisMachine(Made, GpuDiscoveryContract, GpuTelemetryContract):
    def make(self) -> Any:
        return LevelZeroGpuDiscovery()


class TestSysfsOnAFakeTree(Made, GpuDiscoveryContract):
    @pytest.fixture(autouse=True)
    def _tree(self, tmp_path: Path) -> None:
        two_socket_gpu_host(tmp_path)
        self.root = tmp_path

    def make(self) -> Any:
        return SysfsGpuDiscovery(SysfsTopologyProbe(self.root))


class TestSysfsForRealOnThisMachine(Made, GpuDiscoveryContract):
    def make(self) -> Any:
        return SysfsGpuDiscovery()


class TestNvmlJoinedWithFakeSysfsLocality(Made, GpuDiscoveryContract, GpuTelemetryContract):
    @pytest.fixture(autouse=True)
    def _tree(self, tmp_path: Path) -> None:
        two_socket_gpu_host(tmp_path)
        self.root = tmp_path

    def make(self) -> Any:
        locality = LocalityProbe(sysfs_root=self.root)
        nvml = NvmlGpuDiscovery(FakePynvml(SysfsTopologyProbe(self.root).probe()), node="fakehost")
        return JoinedDiscovery(nvml, locality, "test")


@pytest.mark.parametrize("profile", ["dgx-a100", "dgx-h100", "hgx-8x-pcie", "mixed-vendor"])
class TestSimulatedProfiles(Made, GpuDiscoveryContract, GpuTelemetryContract):
    @pytest.fixture(autouse=True)
    def _profile(self, profile: str) -> None:
        self.profile = profile

    def make(self) -> Any:
        return ProfileGpuDiscovery(self.profile, "sim-node")


class TestHwlocXmlAsSimulatedDiscovery(Made, GpuDiscoveryContract, GpuTelemetryContract):
    def make(self) -> Any:
        xml = require_shared("topologies", "hwloc", "nvidiaDGX2.xml")
        return ProfileGpuDiscovery(f"hwloc:{xml}", "dgx2")


class TestSysfsViaDetect(Made, GpuDiscoveryContract, GpuTelemetryContract):
    @pytest.fixture(autouse=True)
    def _tree(self, tmp_path: Path) -> None:
        two_socket_gpu_host(tmp_path)
        self.root = tmp_path

    def make(self) -> Any:
        return detect("sysfs", sysfs_root=self.root)


class TestHwlocViaDetect(Made, GpuDiscoveryContract, GpuTelemetryContract):
    def make(self) -> Any:
        return detect("hwloc", hwloc_xml=require_shared("topologies", "hwloc", "nvidiaDGX2.xml"))


class TestDetectAutoOnThisMachine(Made, GpuDiscoveryContract):
    def make(self) -> Any:
        return detect("auto")
