"""Simulated inventories: the built-in default node and TOML/YAML inventory files.

File format (TOML shown; YAML has the same shape):

    [[nodes]]
    name = "node-a"            # required, unique
    gpus = 8                   # a count: GPUs spread evenly over the NUMA nodes...
    model = "A100-SXM4-80GB"   # optional (default below)
    memory_gib = 80            # per GPU, optional
    vendor = "nvidia"          # nvidia | amd | intel
    numa_nodes = 2             # optional, default 1
    cpus = 128                 # optional, host CPUs (spread evenly over NUMA nodes)
    host_memory_gib = 1024     # optional
    labels = { rack = "r1" }   # optional

    # ...or an explicit list instead of a count:
    # gpus = [{ index = 0, numa = 0, model = "H100-SXM5-80GB", memory_gib = 80 }, ...]

Ids are deterministic: GPU uuids are derived from the node name and index.
"""

from __future__ import annotations

import tomllib
import uuid
from pathlib import Path
from typing import Any

import yaml

from gpu_platform.domain.model.gpu import Gpu, Vendor
from gpu_platform.domain.model.node import Inventory, Node, NumaNode
from gpu_platform.ports.outbound.gpu_discovery import DiscoveryError

__all__ = ["FileGpuDiscovery", "SimulatedGpuDiscovery", "default_node", "load_inventory_file"]

GIB = 1 << 30
DEFAULT_MODEL = "A100-SXM4-80GB"
_NAMESPACE = uuid.UUID("6f1c3c1e-8a6a-4a53-9c51-4c6b2b0b7a10")


def sim_uuid(node: str, index: int) -> str:
    """A stable, GPU-UUID-shaped id for simulated GPU `index` of `node`."""
    return f"GPU-{uuid.uuid5(_NAMESPACE, f'{node}/{index}')}"


def build_node(
    name: str,
    gpus: int | list[dict[str, Any]],
    *,
    model: str = DEFAULT_MODEL,
    memory_gib: float = 80,
    vendor: str = "nvidia",
    numa_nodes: int = 1,
    cpus: int = 0,
    host_memory_gib: float = 0,
    labels: dict[str, str] | None = None,
) -> Node:
    """A node with deterministic ids; GPUs spread evenly over `numa_nodes` when given a count."""
    if numa_nodes < 1:
        raise ValueError(f"node {name}: numa_nodes must be >= 1")
    vendor_v = Vendor(vendor)
    if isinstance(gpus, int):
        if gpus < 0:
            raise ValueError(f"node {name}: gpus must be >= 0")
        per = max(1, -(-gpus // numa_nodes))
        specs = [{"index": i, "numa": min(i // per, numa_nodes - 1)} for i in range(gpus)]
    else:
        specs = gpus
    devices = tuple(
        Gpu(
            uuid=sim_uuid(name, int(s["index"])),
            index=int(s["index"]),
            node=name,
            vendor=Vendor(str(s.get("vendor", vendor_v))),
            model=str(s.get("model", model)),
            memory_bytes=int(float(s.get("memory_gib", memory_gib)) * GIB),
            numa_node=int(s.get("numa", 0)),
            pci_bus_id=f"00000000:{0x10 + int(s['index']):02X}:00.0",
        )
        for s in specs
    )
    per_cpu = cpus // numa_nodes if cpus else 0
    numa = tuple(
        NumaNode(
            i,
            tuple(range(i * per_cpu, (i + 1) * per_cpu)),
            int(host_memory_gib * GIB) // numa_nodes,
        )
        for i in range(numa_nodes)
    )
    return Node(
        name=name,
        gpus=devices,
        numa_nodes=numa,
        cpus=cpus,
        memory_bytes=int(host_memory_gib * GIB),
        labels=tuple(sorted((labels or {}).items())),
    )


def default_node(name: str = "node-0") -> Node:
    """The embedded default: a DGX-A100-like node, 8 GPUs over 2 NUMA nodes (0-3, 4-7)."""
    return build_node(name, 8, numa_nodes=2, cpus=128, host_memory_gib=1024)


class SimulatedGpuDiscovery:
    """Reports a fixed simulated inventory (default: one DGX-A100-like node)."""

    name = "sim"

    def __init__(self, nodes: tuple[Node, ...] | None = None, reason: str = "") -> None:
        self._nodes = nodes if nodes is not None else (default_node(),)
        self._reason = reason

    def discover(self) -> Inventory:
        notes: tuple[str, ...] = ("SIMULATED inventory: no real GPU is managed",)
        if self._reason:
            notes += (self._reason,)
        return Inventory(self._nodes, source=self.name, simulated=True, notes=notes)


def load_inventory_file(path: str | Path) -> tuple[Node, ...]:
    """Parse a TOML or YAML inventory file; DiscoveryError names the file and the entry."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise DiscoveryError(f"inventory file {path}: {exc.strerror or exc}") from exc
    try:
        data = tomllib.loads(text) if path.suffix == ".toml" else yaml.safe_load(text)
    except (tomllib.TOMLDecodeError, yaml.YAMLError) as exc:
        raise DiscoveryError(f"inventory file {path}: not valid {path.suffix[1:]}: {exc}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("nodes"), list) or not data["nodes"]:
        raise DiscoveryError(f"inventory file {path}: expected a non-empty 'nodes' list")
    nodes = []
    for i, entry in enumerate(data["nodes"]):
        if not isinstance(entry, dict) or "name" not in entry or "gpus" not in entry:
            raise DiscoveryError(f"inventory file {path}: nodes[{i}] needs 'name' and 'gpus'")
        try:
            nodes.append(build_node(**entry))
        except (TypeError, ValueError, KeyError) as exc:
            raise DiscoveryError(f"inventory file {path}: nodes[{i}]: {exc}") from exc
    try:
        Inventory(tuple(nodes), source="file", simulated=True)
    except ValueError as exc:
        raise DiscoveryError(f"inventory file {path}: {exc}") from exc
    return tuple(nodes)


class FileGpuDiscovery:
    """Reports the (simulated) inventory described by a TOML/YAML file."""

    name = "file"

    def __init__(self, path: str | Path) -> None:
        self._path = Path(path)

    def discover(self) -> Inventory:
        nodes = load_inventory_file(self._path)
        return Inventory(
            nodes,
            source=f"file:{self._path}",
            simulated=True,
            notes=(f"SIMULATED inventory from {self._path}",),
        )
