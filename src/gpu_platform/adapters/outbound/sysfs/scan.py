"""Linux sysfs: the PCI tree, NUMA nodes, CPU packages, GPUs and NICs, without any vendor library.

Reads (relative to `root`, "/" on a real host):
- `/sys/bus/pci/devices/<bdf>` → realpath `/sys/devices/pci0000:00/0000:00:01.0/...`: the
  path *is* the PCIe ancestry (NCCL does the same); per function `class`, `vendor`,
  `device`, `numa_node` (-1 = unknown).
- `/sys/devices/system/node/node<N>/{cpulist,meminfo,distance}`; without them, one NUMA node
  holding `/sys/devices/system/cpu/online`.
- `/sys/devices/system/cpu/cpu<N>/topology/physical_package_id`.
- `/sys/class/infiniband/<dev>/{device,ports/<n>/state,ports/<n>/link_layer}` and
  `/sys/class/net/<if>/device` for NICs.

GPUs: display class (0x03xxxx) functions of NVIDIA, AMD or Intel (server BMC VGA excluded).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from gpu_platform.adapters.outbound.hwloc.xml_parser import GPU_VENDORS, NVSWITCH_DEVICE_IDS
from gpu_platform.domain.model.node import NumaNode
from gpu_platform.domain.model.topology import (
    GpuSite,
    HostTopology,
    Nic,
    Package,
    PciKind,
    PciNode,
)
from gpu_platform.domain.topology.pcie import classify_bridges
from gpu_platform.ports.outbound.topology_probe import TopologyError

__all__ = ["parse_cpulist", "scan_sysfs"]

_BDF = re.compile(r"^[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
_HOST = re.compile(r"^pci([0-9a-f]{4,8}:[0-9a-f]{2})$")
_BMC_VGA = frozenset({(0x1002, 0x515E), (0x1002, 0x5159)})


def parse_cpulist(text: str) -> tuple[int, ...]:
    """'0-3,8,10-11' → (0, 1, 2, 3, 8, 10, 11)."""
    cpus: list[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        cpus.extend(range(int(lo), int(hi or lo) + 1))
    return tuple(sorted(set(cpus)))


def _read(path: Path, default: str = "") -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return default


def _hex(path: Path) -> int:
    text = _read(path, "0")
    try:
        return int(text, 16)
    except ValueError:
        return 0


def _int(path: Path, default: int = -1) -> int:
    try:
        return int(_read(path, str(default)))
    except ValueError:
        return default


def _numa(root: Path) -> tuple[tuple[NumaNode, ...], tuple[tuple[int, ...], ...]]:
    base = root / "sys/devices/system/node"
    dirs = sorted(
        (d for d in base.glob("node[0-9]*") if d.name[4:].isdigit()),
        key=lambda d: int(d.name[4:]),
    )
    if not dirs:
        cpus = parse_cpulist(_read(root / "sys/devices/system/cpu/online", ""))
        return (NumaNode(0, cpus, 0),), ((10,),)
    nodes = []
    rows = []
    for d in dirs:
        mem = 0
        match = re.search(r"MemTotal:\s+(\d+)\s*kB", _read(d / "meminfo"))
        if match:
            mem = int(match[1]) * 1024
        nodes.append(NumaNode(int(d.name[4:]), parse_cpulist(_read(d / "cpulist")), mem))
        rows.append(tuple(int(x) for x in _read(d / "distance").split()))
    if any(len(r) != len(nodes) for r in rows):
        rows = []
    return tuple(nodes), tuple(rows)


def _packages(root: Path, numa: tuple[NumaNode, ...]) -> tuple[Package, ...]:
    by_pkg: dict[int, list[int]] = {}
    for d in (root / "sys/devices/system/cpu").glob("cpu[0-9]*"):
        if not d.name[3:].isdigit():
            continue
        pkg = _int(d / "topology/physical_package_id", -1)
        if pkg >= 0:
            by_pkg.setdefault(pkg, []).append(int(d.name[3:]))
    if not by_pkg:
        by_pkg = {0: [c for n in numa for c in n.cpus]}
    alone = len(by_pkg) == 1
    return tuple(
        Package(
            pkg,
            tuple(n.id for n in numa if set(n.cpus) & set(cpus) or (alone and not n.cpus)),
            tuple(sorted(cpus)),
        )
        for pkg, cpus in sorted(by_pkg.items())
    )


def _pci(root: Path, single_numa: int) -> tuple[list[PciNode], dict[str, Path]]:
    devices = root / "sys/bus/pci/devices"
    nodes: dict[str, PciNode] = {}
    paths: dict[str, Path] = {}
    if not devices.is_dir():
        return [], {}
    for link in sorted(devices.iterdir()):
        real = Path(os.path.realpath(link))
        parts = real.parts
        host_idx = next((i for i, p in enumerate(parts) if _HOST.match(p)), None)
        if host_idx is None:
            continue
        host_id = f"hostbridge:{parts[host_idx]}"
        parent: str | None = host_id
        if host_id not in nodes:
            nodes[host_id] = PciNode(host_id, PciKind.HOST_BRIDGE)
        cur = Path(*parts[: host_idx + 1])
        for comp in parts[host_idx + 1 :]:
            cur = cur / comp
            if not _BDF.match(comp):
                break
            if comp not in nodes:
                nodes[comp] = _function(cur, comp, parent)
                paths[comp] = cur
            parent = comp
    # A host bridge's NUMA node: that of its functions when they agree.
    out = []
    for n in nodes.values():
        if n.kind is not PciKind.HOST_BRIDGE:
            out.append(n)
            continue
        numas = {c.numa_node for c in nodes.values() if c.parent == n.id and c.numa_node >= 0}
        numa = numas.pop() if len(numas) == 1 else single_numa
        out.append(PciNode(n.id, n.kind, None, numa))
    return out, paths


def _function(path: Path, bdf: str, parent: str | None) -> PciNode:
    cls = _hex(path / "class")
    vendor, device = _hex(path / "vendor"), _hex(path / "device")
    if cls >> 8 == 0x0604:
        kind = PciKind.BRIDGE
    elif vendor == 0x10DE and (device in NVSWITCH_DEVICE_IDS or cls >> 8 == 0x0680):
        kind = PciKind.NVSWITCH
    elif cls >> 16 == 0x03 and vendor in GPU_VENDORS and (vendor, device) not in _BMC_VGA:
        kind = PciKind.GPU
    elif cls >> 16 == 0x02 or cls >> 8 == 0x0C06:
        kind = PciKind.NIC
    else:
        kind = PciKind.OTHER
    numa = _int(path / "numa_node", -1)
    return PciNode(bdf, kind, parent, numa, vendor, device, cls >> 8)


def _inherit_numa(pci: dict[str, PciNode], bdf: str) -> int:
    node: PciNode | None = pci.get(bdf)
    while node is not None:
        if node.numa_node >= 0:
            return node.numa_node
        node = pci.get(node.parent) if node.parent else None
    return -1


def _pci_function_of(path: Path) -> str:
    """The PCI function a class device hangs off: the nearest BDF component of its realpath
    (a virtio NIC's `device` is `virtio0`, whose parent is the PCI function)."""
    for comp in reversed(Path(os.path.realpath(path)).parts):
        if _BDF.match(comp):
            return comp
    return ""


def _nics(root: Path, pci: dict[str, PciNode]) -> tuple[Nic, ...]:
    nics: dict[str, Nic] = {}
    for dev in sorted((root / "sys/class/infiniband").glob("*")):
        bdf = _pci_function_of(dev / "device")
        ports = sorted((dev / "ports").glob("*"))
        state = _read(ports[0] / "state") if ports else ""
        layer = _read(ports[0] / "link_layer") if ports else ""
        netdevs = tuple(sorted(p.name for p in (dev / "device/net").glob("*")))
        numa = pci[bdf].numa_node if bdf in pci else -1
        numa = numa if numa >= 0 or bdf not in pci else _inherit_numa(pci, bdf)
        nics[dev.name] = Nic(dev.name, bdf, "rdma", numa, layer, state, netdevs)
    covered = {n.pci_bus_id for n in nics.values()}
    for net in sorted((root / "sys/class/net").glob("*")):
        if not (net / "device").exists():
            continue  # virtual interface
        bdf = _pci_function_of(net / "device")
        if bdf in covered or bdf not in pci:
            continue
        numa = _inherit_numa(pci, bdf)
        nics[net.name] = Nic(net.name, bdf, "ethernet", numa, "", "", (net.name,))
    return tuple(sorted(nics.values(), key=lambda n: n.name))


def scan_sysfs(root: str | Path = "/", node: str = "") -> HostTopology:
    """The HostTopology sysfs under `root` describes. Raises TopologyError when `root` has no
    `/sys/devices/system` at all (not Linux, or not mounted)."""
    root = Path(root)
    if not (root / "sys/devices/system").is_dir():
        raise TopologyError(f"{root / 'sys/devices/system'}: not found (is sysfs mounted?)")
    numa, distances = _numa(root)
    packages = _packages(root, numa)
    single = numa[0].id if len(numa) == 1 else -1
    raw, _ = _pci(root, single)
    pci = classify_bridges(tuple(raw))
    by_id = {p.id: p for p in pci}
    gpu_fns = sorted(p.id for p in pci if p.kind is PciKind.GPU)
    gpus = tuple(
        GpuSite(
            i,
            bdf,
            GPU_VENDORS[by_id[bdf].vendor_id],
            f"PCI {by_id[bdf].vendor_id:04x}:{by_id[bdf].device_id:04x}",
            numa_node=by_id[bdf].numa_node if by_id[bdf].numa_node >= 0 else single,
        )
        for i, bdf in enumerate(gpu_fns)
    )
    hostname = node or _read(root / "proc/sys/kernel/hostname") or os.uname().nodename
    return HostTopology(
        node=hostname,
        source=f"sysfs:{root}",
        packages=packages,
        numa_nodes=numa,
        numa_distances=distances,
        pci=pci,
        gpus=gpus,
        nics=_nics(root, by_id),
    )
