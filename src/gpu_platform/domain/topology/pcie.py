"""PCIe path levels between two devices of a `HostTopology`, the way NVML and nvidia-smi name them.

A physical PCIe switch appears in the tree as an upstream port (`SWITCH_UP`) whose children
are its downstream ports (`SWITCH_DOWN`); a root port (`ROOT_PORT`) hangs off a host bridge.
Each bridge is mapped to the physical switch it belongs to (a downstream port to its upstream
port; a root port or an unclassified bridge to itself), and the path between two devices is
classified by the switches it crosses:

- one switch (or one root port) in common and nothing else on the path -> PIX
- a common switch but more than one switch on the path                  -> PXB
- only the host bridge in common                                         -> PHB
- different host bridges, same NUMA node                                 -> NODE
- different NUMA nodes, or NUMA unknown                                  -> SYS

A level a vendor library measured (`HostTopology.measured_levels`) wins over the tree.
"""

from __future__ import annotations

from gpu_platform.domain.model.topology import (
    HostTopology,
    LinkLevel,
    PciKind,
    PciNode,
    normalize_bus_id,
)

__all__ = ["PciIndex", "classify_bridges"]


def classify_bridges(nodes: tuple[PciNode, ...]) -> tuple[PciNode, ...]:
    """Tag generic bridges as root ports, switch upstream or downstream ports by alternation:
    a bridge under a host bridge is a root port; under a root port or a downstream port it is
    an upstream port; under an upstream port it is a downstream port."""
    by_id = {n.id: n for n in nodes}
    roles: dict[str, PciKind] = {}

    def role(n: PciNode) -> PciKind:
        if n.id in roles:
            return roles[n.id]
        if n.kind is not PciKind.BRIDGE:
            roles[n.id] = n.kind
            return n.kind
        parent = by_id.get(n.parent) if n.parent is not None else None
        if parent is None or parent.kind is PciKind.HOST_BRIDGE:
            result = PciKind.ROOT_PORT
        elif role(parent) is PciKind.SWITCH_UP:
            result = PciKind.SWITCH_DOWN
        elif role(parent) in (PciKind.ROOT_PORT, PciKind.SWITCH_DOWN):
            result = PciKind.SWITCH_UP
        else:
            result = PciKind.BRIDGE
        roles[n.id] = result
        return result

    out = []
    for n in nodes:
        kind = role(n)
        out.append(n if kind is n.kind else _with_kind(n, kind))
    return tuple(out)


def _with_kind(n: PciNode, kind: PciKind) -> PciNode:
    return PciNode(n.id, kind, n.parent, n.numa_node, n.vendor_id, n.device_id, n.pci_class, n.name)


class PciIndex:
    """Lookup tables over one topology's PCIe tree; built once, then queried many times."""

    __slots__ = ("_by_id", "_chains", "_measured", "_topology")

    def __init__(self, topology: HostTopology) -> None:
        self._topology = topology
        self._by_id = {n.id: n for n in topology.pci}
        self._chains: dict[str, tuple[tuple[str, ...], str | None]] = {}
        self._measured: dict[frozenset[str], LinkLevel] = {
            frozenset((normalize_bus_id(m.a), normalize_bus_id(m.b))): m.level
            for m in topology.measured_levels
        }

    def host_bridge(self, device: str) -> str | None:
        return self._chain(normalize_bus_id(device))[1]

    def numa_of(self, device: str) -> int:
        """The NUMA node of `device`: its own, else its nearest ancestor's; -1 when unknown."""
        node = self._by_id.get(normalize_bus_id(device))
        while node is not None:
            if node.numa_node >= 0:
                return node.numa_node
            node = self._by_id.get(node.parent) if node.parent else None
        return -1

    def level(self, a: str, b: str, numa_a: int = -1, numa_b: int = -1) -> LinkLevel:
        """The PCIe path level between devices `a` and `b` (bus ids). `numa_*` are used when
        the device's NUMA node is not known from the tree."""
        a, b = normalize_bus_id(a), normalize_bus_id(b)
        if a == b:
            return LinkLevel.SAME_BOARD
        measured = self._measured.get(frozenset((a, b)))
        if measured is not None:
            return measured
        switches_a, host_a = self._chain(a)
        switches_b, host_b = self._chain(b)
        if host_a is None or host_a != host_b:
            na = self.numa_of(a) if self.numa_of(a) >= 0 else numa_a
            nb = self.numa_of(b) if self.numa_of(b) >= 0 else numa_b
            return LinkLevel.NODE if na >= 0 and na == nb else LinkLevel.SYS
        top_a, top_b = switches_a[::-1], switches_b[::-1]
        common = 0
        while common < min(len(top_a), len(top_b)) and top_a[common] == top_b[common]:
            common += 1
        if common == 0:
            return LinkLevel.PHB
        crossed = (len(top_a) - common) + (len(top_b) - common) + 1
        return LinkLevel.PIX if crossed <= 1 else LinkLevel.PXB

    def _chain(self, device: str) -> tuple[tuple[str, ...], str | None]:
        """Physical switches from `device` up (deduplicated), and its host bridge id."""
        cached = self._chains.get(device)
        if cached is not None:
            return cached
        switches: list[str] = []
        host: str | None = None
        node = self._by_id.get(device)
        current = self._by_id.get(node.parent) if node is not None and node.parent else None
        while current is not None:
            if current.kind is PciKind.HOST_BRIDGE:
                host = current.id
                break
            if current.kind.is_bridge:
                key = current.id
                if current.kind is PciKind.SWITCH_DOWN and current.parent is not None:
                    key = current.parent
                if not switches or switches[-1] != key:
                    switches.append(key)
            current = self._by_id.get(current.parent) if current.parent else None
        result = (tuple(switches), host)
        self._chains[device] = result
        return result
