"""Named simulated machines with a full topology (PCIe tree, NUMA, NVLink/XGMI, NICs).

Profiles (`PROFILES`):

- `dgx-a100`: 2 sockets / 2 NUMA nodes (CPUs 0-63, 64-127); per NUMA two PCIe complexes,
  each a top switch with one leaf switch per device (2 A100-SXM4-80GB + 2 mlx5 NICs), so
  GPU pairs and GPU-NIC pairs in a complex are PXB, as on a real DGX A100; 6 NVSwitches,
  12 NVLinks per GPU (every pair NV12). GPU i is on NUMA i // 4, like `default_node()`.
- `dgx-h100`: 2 NUMA nodes (CPUs 0-55, 56-111); every H100-SXM5-80GB shares a PCIe switch
  with one ConnectX-7 (PIX); 4 NVSwitches, 18 NVLinks per GPU (NV18).
- `hgx-8x-pcie`: 2 NUMA nodes; per NUMA one PCIe switch with 4 L40S GPUs and one NIC; no
  NVLink (PIX inside a switch, SYS across sockets).
- `mixed-vendor`: 2 NVIDIA A100-PCIE-80GB joined by an NVLink bridge (NV12) on NUMA 0;
  2 AMD Instinct MI210 with an XGMI bridge (XG3) and 1 Intel Data Center GPU Max 1100 on
  NUMA 1; one NIC per socket.
- `hwloc:<path>`: any hwloc XML file (GPU memory as the file says, else 0).

Ids are deterministic: GPU uuids come from `sim_uuid(node, index)` (hwloc files keep their
own `NVIDIAUUID`s), PCI bus ids from the profile's fixed layout.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from gpu_platform.adapters.outbound.hwloc.probe import HwlocTopologyProbe
from gpu_platform.adapters.outbound.sim.inventory import GIB, sim_uuid
from gpu_platform.domain.model.gpu import Vendor
from gpu_platform.domain.model.node import Inventory, Node, NumaNode
from gpu_platform.domain.model.telemetry import (
    Capability,
    CapabilityStatus,
    GpuReading,
    TelemetrySnapshot,
)
from gpu_platform.domain.model.topology import (
    FabricKind,
    GpuSite,
    HostTopology,
    Link,
    Nic,
    NodeFabric,
    Package,
    PciKind,
    PciNode,
)
from gpu_platform.domain.topology.inventory import node_from_topology
from gpu_platform.ports.outbound.gpu_discovery import DiscoveryError

__all__ = ["PROFILES", "ProfileGpuDiscovery", "profile_node", "profile_topology"]

# Idle clocks a simulated GPU reports (an A100 at rest: SM 210 MHz, HBM2e 1593 MHz).
SIM_SM_CLOCK_MHZ = 210
SIM_MEM_CLOCK_MHZ = 1593

_VENDOR_IDS = {Vendor.NVIDIA: 0x10DE, Vendor.AMD: 0x1002, Vendor.INTEL: 0x8086}


@dataclass
class _Builder:
    """Lays out a PCIe tree with deterministic bus numbers."""

    node: str
    pci: list[PciNode] = field(default_factory=list)
    gpus: list[GpuSite] = field(default_factory=list)
    nics: list[Nic] = field(default_factory=list)
    links: list[Link] = field(default_factory=list)
    next_bus: int = 0x01
    ports: dict[str, int] = field(default_factory=dict)

    def _bus(self) -> int:
        bus = self.next_bus
        self.next_bus += 1
        return bus

    def host_bridge(self, numa: int) -> str:
        ident = f"hostbridge:{len([p for p in self.pci if p.kind is PciKind.HOST_BRIDGE])}"
        self.pci.append(PciNode(ident, PciKind.HOST_BRIDGE, None, numa))
        return ident

    def _port(self, parent: str, kind: PciKind) -> str:
        n = self.ports.get(parent, 0)
        self.ports[parent] = n + 1
        bus = self.next_bus
        ident = f"0000:{bus:02x}:{n:02x}.0"
        self.pci.append(PciNode(ident, kind, parent, -1, 0x10B5, 0x9781, 0x0604))
        return ident

    def switch(self, parent: str) -> str:
        """A PCIe switch (upstream port) under a host bridge (via a root port) or a switch."""
        is_host = parent.startswith("hostbridge:")
        parent = self._root_port(parent) if is_host else self._down(parent)
        ident = f"0000:{self._bus():02x}:00.0"
        self.pci.append(PciNode(ident, PciKind.SWITCH_UP, parent, -1, 0x10B5, 0x9781, 0x0604))
        return ident

    def _root_port(self, host: str) -> str:
        n = self.ports.get(host, 0)
        self.ports[host] = n + 1
        ident = f"0000:{0xE0 + int(host.split(':')[1]):02x}:{n + 1:02x}.0"
        self.pci.append(PciNode(ident, PciKind.ROOT_PORT, host, -1, 0x8086, 0x2030, 0x0604))
        return ident

    def _down(self, switch: str) -> str:
        n = self.ports.get(switch, 0)
        self.ports[switch] = n + 1
        ident = f"0000:{int(switch[5:7], 16) + 0x40:02x}:{n:02x}.0"
        self.pci.append(PciNode(ident, PciKind.SWITCH_DOWN, switch, -1, 0x10B5, 0x9781, 0x0604))
        return ident

    def _function(self, parent: str, kind: PciKind, vendor: int, device: int, cls: int) -> str:
        if not parent.startswith("hostbridge:"):
            parent = self._down(parent) if self._is_switch(parent) else parent
        else:
            parent = self._root_port(parent)
        ident = f"0000:{self._bus():02x}:00.0"
        self.pci.append(PciNode(ident, kind, parent, -1, vendor, device, cls))
        return ident

    def _is_switch(self, ident: str) -> bool:
        return any(p.id == ident and p.kind is PciKind.SWITCH_UP for p in self.pci)

    def gpu(
        self, parent: str, vendor: Vendor, model: str, mem_gib: int, numa: int, device: int
    ) -> str:
        bus = self._function(parent, PciKind.GPU, _VENDOR_IDS[vendor], device, 0x0302)
        index = len(self.gpus)
        self.gpus.append(
            GpuSite(index, bus, vendor, model, sim_uuid(self.node, index), numa, mem_gib * GIB)
        )
        return bus

    def nic(self, parent: str, name: str, numa: int) -> str:
        bus = self._function(parent, PciKind.NIC, 0x15B3, 0x101B, 0x0207)
        self.nics.append(
            Nic(name, bus, "rdma", numa, "InfiniBand", "4: ACTIVE", (f"ib{name[5:]}",))
        )
        return bus

    def nvswitch(self, parent: str) -> str:
        return self._function(parent, PciKind.NVSWITCH, 0x10DE, 0x1AF1, 0x0680)

    def topology(self, packages: tuple[Package, ...], numa: tuple[NumaNode, ...]) -> HostTopology:
        n = len(numa)
        distances = tuple(tuple(10 if a == b else 32 for b in range(n)) for a in range(n))
        return HostTopology(
            node=self.node,
            source="sim",
            packages=packages,
            numa_nodes=numa,
            numa_distances=distances,
            pci=tuple(self.pci),
            gpus=tuple(self.gpus),
            nics=tuple(self.nics),
            links=tuple(self.links),
        )


def _sockets(
    cores: int, mem_gib: int, model: str
) -> tuple[tuple[Package, ...], tuple[NumaNode, ...]]:
    numa = tuple(
        NumaNode(i, tuple(range(i * cores, (i + 1) * cores)), mem_gib * GIB) for i in range(2)
    )
    packages = tuple(Package(i, (i,), numa[i].cpus, model) for i in range(2))
    return packages, numa


def _dgx_a100(node: str) -> HostTopology:
    b = _Builder(node)
    nics = 0
    for numa in (0, 1):
        for _ in range(2):
            top = b.switch(b.host_bridge(numa))
            for _ in range(2):
                b.gpu(b.switch(top), Vendor.NVIDIA, "A100-SXM4-80GB", 80, numa, 0x20B2)
            for _ in range(2):
                b.nic(b.switch(top), f"mlx5_{nics}", numa)
                nics += 1
    sw_parent = b.switch(b.host_bridge(1))
    switches = [b.nvswitch(sw_parent) for _ in range(6)]
    for g in b.gpus:
        b.links.extend(Link(g.pci_bus_id, s, FabricKind.NVLINK, 2, 50_000) for s in switches)
    return b.topology(*_sockets(64, 512, "AMD EPYC 7742 64-Core Processor"))


def _dgx_h100(node: str) -> HostTopology:
    b = _Builder(node)
    for numa in (0, 1):
        for k in range(4):
            hb = b.host_bridge(numa)
            sw = b.switch(hb)
            b.gpu(sw, Vendor.NVIDIA, "H100-SXM5-80GB", 80, numa, 0x2330)
            b.nic(sw, f"mlx5_{numa * 4 + k}", numa)
    sw_parent = b.switch(b.host_bridge(1))
    switches = [b.nvswitch(sw_parent) for _ in range(4)]
    for g in b.gpus:
        for s, count in zip(switches, (5, 4, 4, 5), strict=True):
            b.links.append(Link(g.pci_bus_id, s, FabricKind.NVLINK, count, count * 25_000))
    return b.topology(*_sockets(56, 1024, "Intel(R) Xeon(R) Platinum 8480C"))


def _hgx_8x_pcie(node: str) -> HostTopology:
    b = _Builder(node)
    for numa in (0, 1):
        sw = b.switch(b.host_bridge(numa))
        for _ in range(4):
            b.gpu(sw, Vendor.NVIDIA, "L40S", 48, numa, 0x26B9)
        b.nic(sw, f"mlx5_{numa}", numa)
    return b.topology(*_sockets(32, 384, "AMD EPYC 9354 32-Core Processor"))


def _mixed_vendor(node: str) -> HostTopology:
    b = _Builder(node)
    sw = b.switch(b.host_bridge(0))
    a = b.gpu(sw, Vendor.NVIDIA, "A100-PCIE-80GB", 80, 0, 0x20B5)
    c = b.gpu(sw, Vendor.NVIDIA, "A100-PCIE-80GB", 80, 0, 0x20B5)
    b.links.append(Link(a, c, FabricKind.NVLINK, 12, 300_000))
    b.nic(sw, "mlx5_0", 0)
    hb1 = b.host_bridge(1)
    sw1 = b.switch(hb1)
    m0 = b.gpu(sw1, Vendor.AMD, "AMD Instinct MI210", 64, 1, 0x740F)
    m1 = b.gpu(sw1, Vendor.AMD, "AMD Instinct MI210", 64, 1, 0x740F)
    b.links.append(Link(m0, m1, FabricKind.XGMI, 3, 3 * 100_000))
    b.gpu(hb1, Vendor.INTEL, "Intel Data Center GPU Max 1100", 48, 1, 0x0BDA)
    b.nic(sw1, "mlx5_1", 1)
    return b.topology(*_sockets(32, 256, "Intel(R) Xeon(R) Gold 6430"))


PROFILES: dict[str, Callable[[str], HostTopology]] = {
    "dgx-a100": _dgx_a100,
    "dgx-h100": _dgx_h100,
    "hgx-8x-pcie": _hgx_8x_pcie,
    "mixed-vendor": _mixed_vendor,
}


def profile_topology(profile: str, node: str = "node-0") -> HostTopology:
    """The topology of simulated `profile` named `node`; DiscoveryError for an unknown one."""
    if profile.startswith("hwloc:"):
        path = profile.removeprefix("hwloc:")
        topo = HwlocTopologyProbe(path, node=node).probe()
        return replace(topo, source=f"sim:{topo.source}")
    build = PROFILES.get(profile)
    if build is None:
        known = ", ".join([*PROFILES, "hwloc:<path>"])
        raise DiscoveryError(f"unknown simulated profile {profile!r} (known: {known})")
    return build(node)


def profile_node(profile: str, node: str = "node-0", labels: dict[str, str] | None = None) -> Node:
    topo = profile_topology(profile, node)
    if labels:
        topo = replace(topo, labels=tuple(sorted(labels.items())))
    return node_from_topology(topo)


class ProfileGpuDiscovery:
    """Implements GpuDiscovery, GpuTelemetry, TopologyProbe and FabricDiscovery for one
    simulated node built from a named profile. Telemetry is an idle machine: 0 % utilisation,
    no memory used, 30 °C, 60 W."""

    name = "sim"

    def __init__(
        self,
        profile: str = "dgx-a100",
        node: str = "node-0",
        *,
        reason: str = "",
        labels: dict[str, str] | None = None,
    ) -> None:
        self.profile = profile
        self._node = profile_node(profile, node, labels)
        self._reason = reason

    def discover(self) -> Inventory:
        notes: tuple[str, ...] = (
            f"SIMULATED inventory (profile {self.profile}): no real GPU is managed",
        )
        if self._reason:
            notes += (self._reason,)
        return Inventory(
            (self._node,),
            source=f"sim:{self.profile}",
            simulated=True,
            notes=notes,
            capabilities=(Capability("sim", CapabilityStatus.SUPPORTED, self.profile),),
        )

    def snapshot(self) -> TelemetrySnapshot:
        readings = tuple(
            GpuReading(
                uuid=g.uuid,
                index=g.index,
                utilization_pct=0,
                memory_used_bytes=0,
                memory_total_bytes=g.memory_bytes,
                temperature_c=30,
                power_mw=60_000,
                sm_clock_mhz=SIM_SM_CLOCK_MHZ,
                mem_clock_mhz=SIM_MEM_CLOCK_MHZ,
                memory_util_pct=0,
                energy_mj=0,
                pcie_replays=0,
                last_xid=0,
                clock_event_reasons=("gpu_idle",),
                ecc_corrected=0,
                ecc_uncorrected=0,
                gr_engine_active=0.0,  # derived: simulated utilization / 100 (idle)
                tensor_active=0.0,  # likewise: the simulator models no pipes
            )
            for g in self._node.gpus
        )
        return TelemetrySnapshot(self._node.name, f"sim:{self.profile}", readings)

    def probe(self) -> HostTopology:
        assert self._node.topology is not None
        return self._node.topology

    def fabric(self) -> NodeFabric:
        topo = self.probe()
        return NodeFabric(topo.node, topo.nics, topo.labels, source=f"sim:{self.profile}")
