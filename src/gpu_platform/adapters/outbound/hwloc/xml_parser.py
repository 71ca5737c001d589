"""Parse hwloc 2.x XML (`lstopo --of xml`) into a HostTopology.

What is read: Packages (CPU sets, model), NUMANodes (CPU sets, local memory), host bridges
(`bridge_type="0-1"`) and PCI-PCI bridges, PCI functions (`pci_type="CCSS [vvvv:dddd] ..."`),
OS devices (GPU/CoProc names and infos such as `NVIDIAUUID`, `GPUModel`; Network and
OpenFabrics names for NICs), the NUMA distance matrix (`distances2 type="NUMANode"`) and the
`NVLinkBandwidth` matrix (`distances2hetero`, GPU<->GPU, GPU<->NVSwitch, GPU<->Package).

GPUs are display-class functions (class 0x03xx) of NVIDIA, AMD or Intel, except known
server BMC VGA chips. GPU indices follow PCI bus order (NVML's enumeration order).

A malformed or unsupported document raises TopologyError naming the source and the element.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass, field

from gpu_platform.domain.model.gpu import Vendor
from gpu_platform.domain.model.node import NumaNode
from gpu_platform.domain.model.topology import (
    FabricKind,
    GpuSite,
    HostTopology,
    Link,
    Nic,
    Package,
    PciKind,
    PciNode,
    normalize_bus_id,
)
from gpu_platform.domain.topology.pcie import classify_bridges
from gpu_platform.ports.outbound.topology_probe import TopologyError

__all__ = ["GPU_VENDORS", "NVSWITCH_DEVICE_IDS", "parse_hwloc_xml", "parse_mask"]

GPU_VENDORS = {0x10DE: Vendor.NVIDIA, 0x1002: Vendor.AMD, 0x8086: Vendor.INTEL}
NVSWITCH_DEVICE_IDS = frozenset({0x10F5, 0x1AC0, 0x1AC1, 0x1AC2, 0x1AF1, 0x22A3, 0x22A4})
_BMC_VGA = frozenset({(0x1002, 0x515E), (0x1002, 0x5159)})  # ATI ES1000 / RV100 server VGA
_PCI_TYPE = re.compile(r"^([0-9a-fA-F]{4}) \[([0-9a-fA-F]{4}):([0-9a-fA-F]{4})\]")
_OSDEV_NETWORK, _OSDEV_OPENFABRICS = "2", "3"
_CLASS_INFINIBAND = 0x0C06
_NVLINK_PER_LINK_MBPS = 25_000
_NVLINK1_MODELS = ("P100",)


def parse_mask(text: str) -> frozenset[int]:
    """An hwloc bitmap (`0x00000303,0x03030000,,0x0f`, most significant word first) -> bits."""
    text = text.strip()
    if not text:
        return frozenset()
    bits: set[int] = set()
    words = text.split(",")
    for pos, raw in enumerate(reversed(words)):
        word = raw.strip().removeprefix("0x").removeprefix("f...f")
        if word in ("", "0"):
            continue
        value = int(word, 16)
        base = 32 * pos
        while value:
            low = value & -value
            bits.add(base + low.bit_length() - 1)
            value ^= low
    return frozenset(bits)


@dataclass
class _State:
    source: str
    packages: list[Package] = field(default_factory=list)
    numa: list[tuple[NumaNode, int | None]] = field(default_factory=list)
    pci: list[PciNode] = field(default_factory=list)
    gpus: list[tuple[str, Vendor, str, str, int]] = field(default_factory=list)
    nics: list[Nic] = field(default_factory=list)
    gp_to_endpoint: dict[str, str] = field(default_factory=dict)
    gpu_model: dict[str, str] = field(default_factory=dict)
    hostname: str = ""
    host_bridges: int = 0
    seen: set[str] = field(default_factory=set)
    notes: list[str] = field(default_factory=list)

    def fail(self, element: ET.Element, why: str) -> TopologyError:
        attrs = " ".join(f'{k}="{v}"' for k, v in list(element.attrib.items())[:3])
        return TopologyError(f"{self.source}: <{element.tag} {attrs}>: {why}")


def parse_hwloc_xml(
    text: str | bytes, source: str, node: str = "", *, fallback_node: str = "localhost"
) -> HostTopology:
    """The HostTopology described by hwloc XML `text`; `source` names the file in errors.
    The node is named `node`, else the XML's HostName, else `fallback_node`."""
    try:
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        raise TopologyError(f"{source}: not well-formed XML: {exc}") from exc
    if root.tag != "topology":
        raise TopologyError(f"{source}: root element <{root.tag}> is not <topology>")
    version = root.get("version", "")
    if not version.startswith("2."):
        raise TopologyError(
            f'{source}: <topology version="{version}">: unsupported hwloc XML version '
            "(hwloc 2.x format expected; export with hwloc 2.x `lstopo --of xml`)"
        )
    state = _State(source=source)
    top = [c for c in root if c.tag == "object"]
    if len(top) != 1 or top[0].get("type") != "Machine":
        raise TopologyError(f'{source}: <topology> must hold one <object type="Machine">')
    _walk(state, top[0], parent_pci=None, locality=frozenset(), package=None)
    numa_nodes = tuple(sorted((n for n, _ in state.numa), key=lambda n: n.id))
    packages = _packages_with_numa(state)
    pci = classify_bridges(tuple(state.pci))
    numa_of = _numa_lookup(pci, len(numa_nodes))
    gpus = tuple(
        GpuSite(i, bus, vendor, model, uuid, numa_of(bus), mem)
        for i, (bus, vendor, model, uuid, mem) in enumerate(sorted(state.gpus))
    )
    nics = tuple(
        sorted(
            (
                Nic(
                    n.name,
                    n.pci_bus_id,
                    n.kind,
                    numa_of(n.pci_bus_id),
                    n.link_layer,
                    n.state,
                    n.netdevs,
                )
                for n in state.nics
            ),
            key=lambda n: n.name,
        )
    )
    distances = _numa_distances(state, root, numa_nodes)
    links = _nvlinks(state, root)
    return HostTopology(
        node=node or state.hostname or fallback_node,
        source=f"hwloc:{source}",
        packages=packages,
        numa_nodes=numa_nodes,
        numa_distances=distances,
        pci=pci,
        gpus=gpus,
        nics=nics,
        links=links,
        notes=tuple(state.notes),
    )


def _info(element: ET.Element) -> dict[str, str]:
    return {i.get("name", ""): i.get("value", "") for i in element if i.tag == "info"}


def _int_attr(state: _State, element: ET.Element, name: str, default: int = 0) -> int:
    raw = element.get(name)
    if raw is None:
        return default
    try:
        return int(raw)
    except ValueError:
        raise state.fail(element, f"{name}={raw!r} is not an integer") from None


def _mask(state: _State, element: ET.Element, name: str) -> frozenset[int]:
    try:
        return parse_mask(element.get(name, ""))
    except ValueError:
        raise state.fail(element, f"{name} is not an hwloc bitmap") from None


def _walk(
    state: _State,
    element: ET.Element,
    parent_pci: str | None,
    locality: frozenset[int],
    package: int | None,
) -> None:
    kind = element.get("type")
    if kind is None:
        raise state.fail(element, "object without a type attribute")
    here_pci = parent_pci
    if kind == "Machine":
        state.hostname = _info(element).get("HostName", "")
    if element.get("nodeset") is not None and kind not in ("Bridge", "PCIDev", "OSDev"):
        locality = _mask(state, element, "nodeset")
    if kind == "Package":
        package = _int_attr(state, element, "os_index", len(state.packages))
        cpus = tuple(sorted(_mask(state, element, "cpuset")))
        state.packages.append(Package(package, (), cpus, _info(element).get("CPUModel", "")))
    elif kind == "NUMANode":
        numa = NumaNode(
            id=_int_attr(state, element, "os_index"),
            cpus=tuple(sorted(_mask(state, element, "cpuset"))),
            memory_bytes=_int_attr(state, element, "local_memory"),
        )
        state.numa.append((numa, package))
        state.gp_to_endpoint[element.get("gp_index", "")] = f"numa:{numa.id}"
    elif kind == "Bridge":
        here_pci = _bridge(state, element, parent_pci, locality)
    elif kind == "PCIDev":
        here_pci = _pci_device(state, element, parent_pci, locality)
    elif kind == "OSDev":
        _os_device(state, element, parent_pci)
    if kind == "Package":
        state.gp_to_endpoint[element.get("gp_index", "")] = f"cpu:{package}"
    for child in element:
        if child.tag == "object":
            _walk(state, child, here_pci, locality, package)


def _single(locality: frozenset[int]) -> int:
    return next(iter(locality)) if len(locality) == 1 else -1


def _bridge(
    state: _State, element: ET.Element, parent: str | None, locality: frozenset[int]
) -> str:
    btype = element.get("bridge_type", "")
    if btype.startswith("0-"):
        state.host_bridges += 1
        ident = f"hostbridge:{element.get('bridge_pci') or element.get('gp_index')}"
        if any(p.id == ident for p in state.pci):
            ident = f"{ident}#{element.get('gp_index')}"
        state.pci.append(PciNode(ident, PciKind.HOST_BRIDGE, None, _single(locality)))
        return ident
    bus_id = element.get("pci_busid")
    if not bus_id:
        raise state.fail(element, "PCI bridge without pci_busid")
    cls, vendor, device = _pci_type(state, element)
    ident = _unique(state, normalize_bus_id(bus_id), element)
    state.pci.append(PciNode(ident, PciKind.BRIDGE, parent, -1, vendor, device, cls))
    return ident


def _unique(state: _State, ident: str, element: ET.Element) -> str:
    """hwloc tolerates a bus id used twice (hand-edited files); keep the tree consistent."""
    if ident not in state.seen:
        state.seen.add(ident)
        return ident
    unique = f"{ident}#{element.get('gp_index', len(state.pci))}"
    state.notes.append(f"{state.source}: PCI bus id {ident} appears twice; second is {unique}")
    state.seen.add(unique)
    return unique


def _pci_type(state: _State, element: ET.Element) -> tuple[int, int, int]:
    raw = element.get("pci_type", "")
    match = _PCI_TYPE.match(raw)
    if match is None:
        raise state.fail(element, f"pci_type={raw!r} is not 'CCSS [vvvv:dddd] ...'")
    return int(match[1], 16), int(match[2], 16), int(match[3], 16)


def _pci_device(
    state: _State, element: ET.Element, parent: str | None, locality: frozenset[int]
) -> str:
    bus_id = element.get("pci_busid")
    if not bus_id:
        raise state.fail(element, "PCIDev without pci_busid")
    ident = _unique(state, normalize_bus_id(bus_id), element)
    cls, vendor, device = _pci_type(state, element)
    info = _info(element)
    numa = _single(locality) if parent is None else -1
    if element.get("subtype") == "NVSwitch" or (vendor == 0x10DE and device in NVSWITCH_DEVICE_IDS):
        kind = PciKind.NVSWITCH
    elif cls >> 8 == 0x03 and vendor in GPU_VENDORS and (vendor, device) not in _BMC_VGA:
        kind = PciKind.GPU
        fallback = f"PCI {vendor:04x}:{device:04x}"
        model = info.get("PCIDevice", "") or fallback
        state.gpus.append((ident, GPU_VENDORS[vendor], model, "", 0))
    elif cls >> 8 == 0x02 or cls == _CLASS_INFINIBAND:
        kind = PciKind.NIC
    else:
        kind = PciKind.OTHER
    name = info.get("PCIDevice", "")
    state.pci.append(PciNode(ident, kind, parent, numa, vendor, device, cls, name))
    state.gp_to_endpoint[element.get("gp_index", "")] = ident
    if kind is PciKind.NIC:
        _nic(state, element, ident)
    return ident


def _nic(state: _State, element: ET.Element, bus_id: str) -> None:
    osdevs = [c for c in element if c.tag == "object" and c.get("type") == "OSDev"]
    rdma = [o for o in osdevs if o.get("osdev_type") == _OSDEV_OPENFABRICS]
    netdevs = tuple(o.get("name", "") for o in osdevs if o.get("osdev_type") == _OSDEV_NETWORK)
    if rdma:
        info = _info(rdma[0])
        name = rdma[0].get("name", bus_id)
        state.nics.append(
            Nic(
                name,
                bus_id,
                "rdma",
                -1,
                info.get("Port1LinkLayer", ""),
                info.get("Port1State", ""),
                netdevs,
            )
        )
    else:
        name = netdevs[0] if netdevs else f"pci-{bus_id}"
        state.nics.append(Nic(name, bus_id, "ethernet", -1, "", "", netdevs))


def _os_device(state: _State, element: ET.Element, parent: str | None) -> None:
    info = _info(element)
    if parent is None:
        return
    state.gp_to_endpoint[element.get("gp_index", "")] = parent
    model = info.get("GPUModel")
    if not model:
        return
    for i, (bus, vendor, old_model, old_uuid, old_mem) in enumerate(state.gpus):
        if bus != parent:
            continue
        subtype = element.get("subtype", "") or info.get("Backend", "")
        better = subtype in ("CUDA", "NVML") or not old_model
        mem_kb = info.get("CUDAGlobalMemorySize", "")
        mem = old_mem or (int(mem_kb) * 1024 if mem_kb.isdigit() else 0)
        uuid = old_uuid or info.get("NVIDIAUUID", "")
        state.gpus[i] = (bus, vendor, model if better else old_model, uuid, mem)


def _numa_lookup(pci: tuple[PciNode, ...], numa_count: int) -> Callable[[str], int]:
    by_id = {p.id: p for p in pci}

    def numa_of(bus: str) -> int:
        node = by_id.get(bus)
        while node is not None:
            if node.numa_node >= 0:
                return node.numa_node
            node = by_id.get(node.parent) if node.parent else None
        return 0 if numa_count == 1 else -1

    return numa_of


def _packages_with_numa(state: _State) -> tuple[Package, ...]:
    out = []
    for pkg in state.packages:
        mine = [n.id for n, p in state.numa if p == pkg.id]
        if not mine:
            mine = [n.id for n, _ in state.numa if set(n.cpus) & set(pkg.cpus)]
        out.append(Package(pkg.id, tuple(sorted(mine)), pkg.cpus, pkg.model))
    return tuple(sorted(out, key=lambda p: p.id))


def _values(state: _State, element: ET.Element, tag: str) -> list[str]:
    return [v for part in element.findall(tag) for v in (part.text or "").split()]


def _matrix(state: _State, element: ET.Element, n: int) -> list[list[int]]:
    try:
        values = [int(v) for v in _values(state, element, "u64values")]
    except ValueError:
        raise state.fail(element, "u64values holds a non-integer") from None
    if len(values) != n * n:
        raise state.fail(element, f"{len(values)} values for {n}x{n} objects")
    return [values[i * n : (i + 1) * n] for i in range(n)]


def _numa_distances(
    state: _State, root: ET.Element, numa_nodes: tuple[NumaNode, ...]
) -> tuple[tuple[int, ...], ...]:
    candidates = [d for d in root.iter("distances2") if d.get("type") == "NUMANode"]
    candidates.sort(key=lambda d: d.get("name") != "NUMALatency")
    if not candidates:
        return ((10,),) if len(numa_nodes) == 1 else ()
    dist = candidates[0]
    n = _int_attr(state, dist, "nbobjs")
    indexes = _values(state, dist, "indexes")
    if dist.get("indexing", "os") != "os" or len(indexes) != n:
        raise state.fail(dist, "expected os indexing with one index per object")
    matrix = _matrix(state, dist, n)
    order = [int(i) for i in indexes]
    ids = [x.id for x in numa_nodes]
    if sorted(order) != sorted(ids):
        raise state.fail(dist, f"indexes {order} do not match NUMA nodes {ids}")
    pos = {os_index: k for k, os_index in enumerate(order)}
    return tuple(tuple(matrix[pos[a]][pos[b]] for b in ids) for a in ids)


def _nvlinks(state: _State, root: ET.Element) -> tuple[Link, ...]:
    links: list[Link] = []
    for dist in root.iter("distances2hetero"):
        if dist.get("name") != "NVLinkBandwidth":
            continue
        n = _int_attr(state, dist, "nbobjs")
        refs = _values(state, dist, "indexes")
        if len(refs) != n:
            raise state.fail(dist, f"{len(refs)} indexes for {n} objects")
        ends = []
        for ref in refs:
            _, _, gp = ref.partition(":")
            endpoint = state.gp_to_endpoint.get(gp)
            if endpoint is None:
                raise state.fail(dist, f"index {ref} names no object in this document")
            ends.append(endpoint)
        matrix = _matrix(state, dist, n)
        models = dict((bus, model) for bus, _, model, _, _ in state.gpus)
        for i in range(n):
            for j in range(i + 1, n):
                bw = max(matrix[i][j], matrix[j][i])
                if bw <= 0 or ends[i] == ends[j]:
                    continue
                model = models.get(ends[i], "") + models.get(ends[j], "")
                per = 20_000 if any(m in model for m in _NVLINK1_MODELS) else _NVLINK_PER_LINK_MBPS
                links.append(Link(ends[i], ends[j], FabricKind.NVLINK, max(1, bw // per), bw))
    return tuple(links)
