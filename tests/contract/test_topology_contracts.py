"""TopologyProbe and FabricDiscovery contracts, run against every adapter and fake."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpu_platform.adapters.outbound.amdsmi import AmdSmiGpuDiscovery
from gpu_platform.adapters.outbound.discovery import JoinedDiscovery, LocalityProbe
from gpu_platform.adapters.outbound.hwloc.probe import HwlocFabricDiscovery, HwlocTopologyProbe
from gpu_platform.adapters.outbound.levelzero import LevelZeroGpuDiscovery
from gpu_platform.adapters.outbound.nvml import NvmlGpuDiscovery
from gpu_platform.adapters.outbound.sim.profiles import ProfileGpuDiscovery, profile_topology
from gpu_platform.adapters.outbound.sysfs import SysfsFabricDiscovery, SysfsTopologyProbe
from gpu_platform.domain.model.topology import NodeFabric
from gpu_platform.ports.outbound.fabric_discovery import FabricDiscovery
from gpu_platform.ports.outbound.topology_probe import TopologyProbe
from gpu_platform.testing.contracts import FabricDiscoveryContract, TopologyProbeContract
from gpu_platform.testing.fake_amdsmi import FakeAmdSmi
from gpu_platform.testing.fake_pynvml import FakePynvml
from gpu_platform.testing.fake_pyzes import FakePyzes
from gpu_platform.testing.fake_sysfs import two_socket_gpu_host
from gpu_platform.testing.system import require_shared, require_tool
from gpu_platform.testing.topology_fakes import StaticFabricDiscovery, StaticTopologyProbe
from tests.contract._made import Made

MIXED = profile_topology("mixed-vendor", "mixed")
XMLS = ["nvidiaDGX2.xml", "24em64t-2n6c2t-pci.xml", "16intel64-manyVFs.xml"]


class FakeTree(Made):
    @pytest.fixture(autouse=True)
    def _tree(self, tmp_path: Path) -> None:
        two_socket_gpu_host(tmp_path)
        self.root = tmp_path


@pytest.mark.parametrize("name", XMLS)
class TestHwlocFiles(Made, TopologyProbeContract, FabricDiscoveryContract):
    @pytest.fixture(autouse=True)
    def _name(self, name: str) -> None:
        self.name = name

    def make(self) -> Any:
        probe = HwlocTopologyProbe(require_shared("topologies", "hwloc", self.name))
        return _Both(probe, HwlocFabricDiscovery(probe))


class TestHwlocLstopoOnThisMachine(Made, TopologyProbeContract, FabricDiscoveryContract):
    def make(self) -> Any:
        probe = HwlocTopologyProbe(lstopo=require_tool("lstopo", "hwloc-nox"))
        return _Both(probe, HwlocFabricDiscovery(probe))


class TestSysfsOnAFakeTree(FakeTree, TopologyProbeContract, FabricDiscoveryContract):
    def make(self) -> Any:
        probe = SysfsTopologyProbe(self.root, labels=(("rack", "r1"),))
        return _Both(probe, SysfsFabricDiscovery(probe))


class TestSysfsForRealOnThisMachine(Made, TopologyProbeContract, FabricDiscoveryContract):
    def make(self) -> Any:
        probe = SysfsTopologyProbe()
        return _Both(probe, SysfsFabricDiscovery(probe))


class TestNvmlOnFakePynvml(Made, TopologyProbeContract):
    def make(self) -> Any:
        return NvmlGpuDiscovery(FakePynvml(profile_topology("dgx-h100")), node="h100")


class TestAmdSmiOnFakeAmdSmi(Made, TopologyProbeContract):
    def make(self) -> Any:
        return AmdSmiGpuDiscovery(FakeAmdSmi(MIXED), node="mixed")


class TestLevelZeroOnFakePyzes(Made, TopologyProbeContract):
    def make(self) -> Any:
        return LevelZeroGpuDiscovery(FakePyzes(MIXED), node="mixed")


class TestJoinedNvmlAndFakeSysfs(FakeTree, TopologyProbeContract, FabricDiscoveryContract):
    def make(self) -> Any:
        nvml = NvmlGpuDiscovery(FakePynvml(SysfsTopologyProbe(self.root).probe()), node="fakehost")
        return JoinedDiscovery(nvml, LocalityProbe(sysfs_root=self.root), "test")


@pytest.mark.parametrize("profile", ["dgx-a100", "dgx-h100", "hgx-8x-pcie", "mixed-vendor"])
class TestSimulatedProfiles(Made, TopologyProbeContract, FabricDiscoveryContract):
    @pytest.fixture(autouse=True)
    def _profile(self, profile: str) -> None:
        self.profile = profile

    def make(self) -> Any:
        return ProfileGpuDiscovery(self.profile, labels={"rack": "r2", "leaf": "l1"})


class TestInMemoryFakes(Made, TopologyProbeContract, FabricDiscoveryContract):
    def make(self) -> Any:
        topo = profile_topology("hgx-8x-pcie", "static")
        return _Both(
            StaticTopologyProbe(topo),
            StaticFabricDiscovery(NodeFabric(topo.node, topo.nics, (("rack", "r3"),))),
        )


class _Both:
    """One object exposing a probe's `probe()` and a fabric adapter's `fabric()`."""

    def __init__(self, probe: TopologyProbe, fabric: FabricDiscovery) -> None:
        self.name = probe.name
        self._probe = probe
        self._fabric = fabric

    def probe(self) -> Any:
        return self._probe.probe()

    def fabric(self) -> Any:
        return self._fabric.fabric()
