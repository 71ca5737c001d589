"""The machine model under placement: host -> packages -> NUMA nodes -> PCIe tree -> GPUs and NICs.

Theory of operation. A `HostTopology` is a frozen snapshot of one host as discovery saw it:

- `packages` (sockets) own NUMA node ids; `numa_nodes` carry CPU ids and memory;
  `numa_distances` is the ACPI SLIT-style matrix (10 = local), rows in `numa_nodes` order.
- `pci` is the PCIe tree, flattened: every `PciNode` names its parent by id, so the tree is
  rebuilt by following `parent` up to a host bridge (`PciKind.HOST_BRIDGE`, parent None).
  Bridges are tagged `ROOT_PORT`, `SWITCH_UP` or `SWITCH_DOWN`: a physical PCIe switch is an
  upstream port plus its downstream ports.
- `gpus` and `nics` point into the tree by PCI bus id (`0000:34:00.0`, lower case).
- `links` are GPU fabric links (NVLink, XGMI, Xe Link) between two endpoints named by PCI bus
  id; an endpoint may be an NVSwitch (`PciKind.NVSWITCH`) or a CPU package (`cpu:<id>`).
- `measured_levels` are PCIe path levels a vendor library reported for a GPU pair (NVML's
  common-ancestor query); they override what the tree implies.

Pure data: no I/O. Distances and matrices over it live in `gpu_platform.domain.topology`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from gpu_platform.domain.model.gpu import Vendor
from gpu_platform.domain.model.node import NumaNode

__all__ = [
    "FabricKind",
    "GpuSite",
    "HostTopology",
    "Link",
    "LinkLevel",
    "MeasuredLevel",
    "Nic",
    "NodeFabric",
    "Package",
    "PciKind",
    "PciNode",
    "normalize_bus_id",
]


class LinkLevel(enum.IntEnum):
    """PCIe path level between two devices, as NVML's `nvmlDeviceGetTopologyCommonAncestor`.

    Values are NVML's (lower is closer); labels are `nvidia-smi topo -m`'s.
    """

    SAME_BOARD = 0  # NVML_TOPOLOGY_INTERNAL: e.g. the two GPUs of a K80
    PIX = 10  # NVML_TOPOLOGY_SINGLE: at most one PCIe switch on the path
    PXB = 20  # NVML_TOPOLOGY_MULTIPLE: several switches, no host bridge
    PHB = 30  # NVML_TOPOLOGY_HOSTBRIDGE: through one PCIe host bridge
    NODE = 40  # NVML_TOPOLOGY_NODE: host bridges of one NUMA node
    SYS = 50  # NVML_TOPOLOGY_SYSTEM: across the SMP interconnect

    @property
    def label(self) -> str:
        return "BRD" if self is LinkLevel.SAME_BOARD else self.name


class FabricKind(enum.StrEnum):
    NVLINK = "nvlink"
    XGMI = "xgmi"
    XE_LINK = "xelink"


class PciKind(enum.StrEnum):
    HOST_BRIDGE = "hostbridge"
    ROOT_PORT = "rootport"
    SWITCH_UP = "switch-up"
    SWITCH_DOWN = "switch-down"
    BRIDGE = "bridge"  # a PCI-PCI bridge whose role is unknown (legacy PCI)
    GPU = "gpu"
    NIC = "nic"
    NVSWITCH = "nvswitch"
    OTHER = "other"

    @property
    def is_bridge(self) -> bool:
        return self in _BRIDGES


_BRIDGES = frozenset(
    {PciKind.HOST_BRIDGE, PciKind.ROOT_PORT, PciKind.SWITCH_UP, PciKind.SWITCH_DOWN, PciKind.BRIDGE}
)


def normalize_bus_id(bus_id: str) -> str:
    """`00000000:07:00.0` (NVML) or `0000:07:00.0` (sysfs, hwloc) -> `0000:07:00.0`."""
    text = bus_id.strip().lower()
    parts = text.split(":")
    if len(parts) == 2:  # bus:dev.fn without a domain
        parts = ["0000", *parts]
    if len(parts) != 3:
        return text
    domain = parts[0].lstrip("0").rjust(4, "0")  # NVML pads to 8 digits; VMD domains have 5
    return f"{domain}:{parts[1].rjust(2, '0')}:{parts[2]}"


@dataclass(frozen=True, slots=True)
class PciNode:
    """One node of the PCIe tree. `id` is the bus id for functions and bridges with one, or a
    synthetic `hostbridge:<n>` for host bridges. `numa_node` is -1 when unknown."""

    id: str
    kind: PciKind
    parent: str | None = None
    numa_node: int = -1
    vendor_id: int = 0
    device_id: int = 0
    pci_class: int = 0
    name: str = ""


@dataclass(frozen=True, slots=True)
class Package:
    """A CPU socket: its OS index, the NUMA node ids it holds and its CPU ids."""

    id: int
    numa_nodes: tuple[int, ...] = ()
    cpus: tuple[int, ...] = ()
    model: str = ""


@dataclass(frozen=True, slots=True)
class GpuSite:
    """Where a GPU sits: node-local `index`, PCI bus id, vendor, model, NUMA node (-1 unknown),
    memory in bytes (0 unknown) and the CPUs local to it when the vendor reports them."""

    index: int
    pci_bus_id: str
    vendor: Vendor
    model: str = ""
    uuid: str = ""
    numa_node: int = -1
    memory_bytes: int = 0
    cpus: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Nic:
    """A network adapter: `name` as the OS names it (`mlx5_0`, `eth0`), `kind` `rdma` for an
    RDMA-capable device (InfiniBand, RoCE, usNIC) or `ethernet`; `link_layer` when known."""

    name: str
    pci_bus_id: str
    kind: str = "rdma"
    numa_node: int = -1
    link_layer: str = ""
    state: str = ""
    netdevs: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Link:
    """A fabric link bundle between endpoints `a` and `b` (PCI bus ids, or `cpu:<package>`).
    `count` links of `kind`; `bandwidth_mbps` is the bundle's bandwidth in MB/s (0 unknown)."""

    a: str
    b: str
    kind: FabricKind
    count: int
    bandwidth_mbps: int = 0

    def __post_init__(self) -> None:
        if self.count < 1:
            raise ValueError(f"link {self.a}-{self.b}: count must be >= 1, got {self.count}")


@dataclass(frozen=True, slots=True)
class MeasuredLevel:
    """A PCIe path level reported by a vendor library for GPUs at bus ids `a` and `b`."""

    a: str
    b: str
    level: LinkLevel


@dataclass(frozen=True, slots=True)
class HostTopology:
    """One host's topology snapshot (see the module docstring). `source` names the adapter(s);
    `labels` carry cross-node placement (`rack`, `leaf`)."""

    node: str
    source: str = ""
    packages: tuple[Package, ...] = ()
    numa_nodes: tuple[NumaNode, ...] = ()
    numa_distances: tuple[tuple[int, ...], ...] = ()
    pci: tuple[PciNode, ...] = ()
    gpus: tuple[GpuSite, ...] = ()
    nics: tuple[Nic, ...] = ()
    links: tuple[Link, ...] = ()
    measured_levels: tuple[MeasuredLevel, ...] = ()
    labels: tuple[tuple[str, str], ...] = ()
    notes: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        ids = [p.id for p in self.pci]
        if len(set(ids)) != len(ids):
            raise ValueError(f"topology {self.node}: duplicate PCI node ids")
        known = set(ids)
        for p in self.pci:
            if p.parent is not None and p.parent not in known:
                raise ValueError(f"topology {self.node}: {p.id} has unknown parent {p.parent}")
        indices = [g.index for g in self.gpus]
        if len(set(indices)) != len(indices):
            raise ValueError(f"topology {self.node}: duplicate GPU indices")
        n = len(self.numa_distances)
        if n and (n != len(self.numa_nodes) or any(len(r) != n for r in self.numa_distances)):
            raise ValueError(f"topology {self.node}: NUMA distance matrix is not {n}x{n}")

    def pci_node(self, id_: str) -> PciNode | None:
        for p in self.pci:
            if p.id == id_:
                return p
        return None

    def gpu(self, index: int) -> GpuSite:
        for g in self.gpus:
            if g.index == index:
                return g
        raise KeyError(f"topology {self.node} has no GPU index {index}")

    @property
    def nvswitches(self) -> tuple[PciNode, ...]:
        return tuple(p for p in self.pci if p.kind is PciKind.NVSWITCH)

    def numa_distance(self, a: int, b: int) -> int | None:
        """SLIT distance between NUMA nodes `a` and `b` (10 = local), None when unknown."""
        ids = [n.id for n in self.numa_nodes]
        if not self.numa_distances or a not in ids or b not in ids:
            return None
        return self.numa_distances[ids.index(a)][ids.index(b)]


@dataclass(frozen=True, slots=True)
class NodeFabric:
    """The cross-node view of one host: its NICs and its placement labels (`rack`, `leaf`)."""

    node: str
    nics: tuple[Nic, ...] = ()
    labels: tuple[tuple[str, str], ...] = ()
    source: str = ""

    def label(self, key: str) -> str | None:
        return dict(self.labels).get(key)
