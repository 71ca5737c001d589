"""Choosing the discovery adapter: auto-detection, explicit names and plugins.

`detect("auto")` tries NVML, then amdsmi, then Level Zero; the first whose library loads and
finds at least one GPU wins and is joined with the host's locality view (hwloc when `lstopo`
or an XML is available, else sysfs). When none finds a GPU, the simulated fallback is used:
the inventory file when one is given, else the named simulated profile. Every choice states
its reason in the Inventory's `notes` (and `source`).

Explicit names: `nvml`, `amdsmi`, `levelzero` (joined with locality as above), `sysfs`
(GPUs seen on the PCI bus), `hwloc` (GPUs in lstopo's view or in `hwloc_xml`), `sim`
(`sim_profile`), `file` (`inventory_file`), or the name of a plugin registered in the
entry-point group `gpu_platform.adapters` (see docs/adapters.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import Any

from gpu_platform.adapters.outbound.amdsmi import AmdSmiGpuDiscovery
from gpu_platform.adapters.outbound.hwloc.probe import HwlocTopologyProbe, find_lstopo
from gpu_platform.adapters.outbound.levelzero import LevelZeroGpuDiscovery
from gpu_platform.adapters.outbound.nvml import NvmlGpuDiscovery
from gpu_platform.adapters.outbound.sim.inventory import FileGpuDiscovery
from gpu_platform.adapters.outbound.sim.profiles import ProfileGpuDiscovery
from gpu_platform.adapters.outbound.sysfs import SysfsTopologyProbe
from gpu_platform.domain.model.node import Inventory
from gpu_platform.domain.model.telemetry import (
    Capability,
    CapabilityStatus,
    GpuReading,
    TelemetrySnapshot,
)
from gpu_platform.domain.model.topology import HostTopology, NodeFabric
from gpu_platform.domain.topology.inventory import node_from_topology
from gpu_platform.domain.topology.join import join_topologies
from gpu_platform.ports.outbound.gpu_discovery import DiscoveryError, GpuDiscovery
from gpu_platform.ports.outbound.topology_probe import TopologyError

__all__ = [
    "BUILTIN",
    "PLUGIN_GROUP",
    "JoinedDiscovery",
    "LocalityProbe",
    "detect",
    "plugin_names",
    "vendor_adapters",
]

PLUGIN_GROUP = "gpu_platform.adapters"
BUILTIN = ("auto", "nvml", "amdsmi", "levelzero", "sysfs", "hwloc", "sim", "file")


class LocalityProbe:
    """Implements TopologyProbe: hwloc (an XML, or lstopo when installed), falling back to
    sysfs when lstopo is missing or fails. A `sysfs_root` other than "/" (a chroot, a test
    tree) is read with sysfs directly, since lstopo only sees the real host. `fallbacks`
    records why a source was skipped."""

    name = "locality"

    def __init__(
        self,
        hwloc_xml: str | Path | None = None,
        *,
        sysfs_root: str | Path = "/",
        node: str = "",
        labels: tuple[tuple[str, str], ...] = (),
        lstopo: str | None = None,
    ) -> None:
        self._xml = hwloc_xml
        self._root = sysfs_root
        self._node = node
        self._labels = labels
        self._lstopo = lstopo
        self.fallbacks: list[str] = []

    def probe(self) -> HostTopology:
        self.fallbacks = []
        if self._xml is not None:  # an explicit file: its errors are the caller's to see
            return HwlocTopologyProbe(self._xml, node=self._node, labels=self._labels).probe()
        tool = self._lstopo or find_lstopo()
        if Path(self._root) != Path("/"):
            tool = None
            self.fallbacks.append(f"sysfs root {self._root}: reading sysfs, not lstopo")
        elif tool is None:
            self.fallbacks.append("lstopo not installed (Debian hwloc-nox); using sysfs")
        if tool is not None:
            try:
                return HwlocTopologyProbe(node=self._node, lstopo=tool, labels=self._labels).probe()
            except TopologyError as exc:
                self.fallbacks.append(f"hwloc failed ({exc}); using sysfs")
        return SysfsTopologyProbe(self._root, node=self._node, labels=self._labels).probe()


class JoinedDiscovery:
    """A vendor adapter joined with the host's locality view. Implements GpuDiscovery,
    GpuTelemetry, TopologyProbe and FabricDiscovery."""

    def __init__(self, vendor: Any, locality: LocalityProbe, reason: str) -> None:
        self.vendor = vendor
        self.locality = locality
        self.reason = reason
        self.name = str(vendor.name)

    def probe(self) -> HostTopology:
        vendor_topo: HostTopology = self.vendor.probe()
        try:
            local = self.locality.probe()
        except TopologyError as exc:
            return replace(vendor_topo, notes=(*vendor_topo.notes, f"no locality view: {exc}"))
        return join_topologies(vendor_topo, local)

    def discover(self) -> Inventory:
        inv: Inventory = self.vendor.discover()
        topo = self.probe()
        node = node_from_topology(topo)
        return Inventory(
            (node,),
            source=f"{inv.source}+{topo.source.split('+')[-1].split(':')[0]}",
            simulated=False,
            notes=(self.reason, *inv.notes, *self.locality.fallbacks),
            capabilities=inv.capabilities,
        )

    def snapshot(self) -> TelemetrySnapshot:
        snap: TelemetrySnapshot = self.vendor.snapshot()
        return snap

    def fabric(self) -> NodeFabric:
        topo = self.locality.probe()
        return NodeFabric(topo.node, topo.nics, topo.labels, source=topo.source)


class _TopologyDiscovery:
    """GpuDiscovery over a locality probe alone (sysfs or hwloc): GPUs as PCI functions."""

    def __init__(self, name: str, probe: Any, simulated: bool, reason: str) -> None:
        self.name = name
        self._probe = probe
        self._simulated = simulated
        self._reason = reason

    def probe(self) -> HostTopology:
        topo: HostTopology = self._probe.probe()
        return topo

    def discover(self) -> Inventory:
        topo = self.probe()
        node = node_from_topology(topo)
        return Inventory(
            (node,),
            source=topo.source,
            simulated=self._simulated,
            notes=(self._reason, f"{len(node.gpus)} GPU(s) in {topo.source}"),
            capabilities=(Capability(self.name, CapabilityStatus.SUPPORTED, topo.source),),
        )

    def snapshot(self) -> TelemetrySnapshot:
        """No vendor library: one reading per GPU, every value unknown, and why."""
        node = self.discover().nodes[0]
        readings = tuple(GpuReading(uuid=g.uuid, index=g.index) for g in node.gpus)
        why = Capability(
            f"{self.name}.telemetry",
            CapabilityStatus.NOT_SUPPORTED,
            "GPUs seen as PCI functions only; readings need a vendor library",
        )
        return TelemetrySnapshot(node.name, self.name, readings, (why,))

    def fabric(self) -> NodeFabric:
        topo = self.probe()
        return NodeFabric(topo.node, topo.nics, topo.labels, source=topo.source)


def vendor_adapters(node: str | None = None) -> dict[str, Callable[[], Any]]:
    """The vendor adapters in auto-detection order (NVML, amdsmi, Level Zero)."""
    return {
        "nvml": lambda: NvmlGpuDiscovery(node=node),
        "amdsmi": lambda: AmdSmiGpuDiscovery(node=node),
        "levelzero": lambda: LevelZeroGpuDiscovery(node=node),
    }


def _plugins() -> dict[str, EntryPoint]:
    return {ep.name: ep for ep in entry_points(group=PLUGIN_GROUP)}


def plugin_names() -> tuple[str, ...]:
    return tuple(sorted(_plugins()))


def _load_plugin(name: str, options: dict[str, Any]) -> GpuDiscovery:
    ep = _plugins()[name]
    try:
        factory = ep.load()
        adapter = factory(**options)
    except Exception as exc:
        raise DiscoveryError(f"plugin {name!r} ({ep.value}) failed to load: {exc}") from exc
    if not isinstance(adapter, GpuDiscovery):
        raise DiscoveryError(
            f"plugin {name!r} ({ep.value}) returned {type(adapter).__name__}, "
            "which has no `name` and `discover()` (GpuDiscovery)"
        )
    return adapter


def detect(
    preference: str = "auto",
    *,
    inventory_file: str | Path | None = None,
    sim_profile: str = "dgx-a100",
    hwloc_xml: str | Path | None = None,
    node: str | None = None,
    labels: dict[str, str] | None = None,
    sysfs_root: str | Path = "/",
    vendors: dict[str, Callable[[], Any]] | None = None,
) -> GpuDiscovery:
    """The discovery adapter for `preference` (see the module docstring). Every built-in result
    except `file` also implements GpuTelemetry, TopologyProbe and FabricDiscovery (sysfs and
    hwloc report telemetry as not supported). `vendors` replaces the vendor adapter factories
    (tests).
    Raises DiscoveryError for an unknown name or a plugin that fails to load."""
    label_items = tuple(sorted((labels or {}).items()))
    locality = LocalityProbe(hwloc_xml, sysfs_root=sysfs_root, node=node or "", labels=label_items)
    vendors = vendors if vendors is not None else vendor_adapters(node)
    if preference in vendors:
        return JoinedDiscovery(
            vendors[preference](), locality, f"discovery={preference} (configured)"
        )
    if preference == "sysfs":
        probe = SysfsTopologyProbe(sysfs_root, node=node or "", labels=label_items)
        return _TopologyDiscovery("sysfs", probe, False, "discovery=sysfs (configured)")
    if preference == "hwloc":
        simulated = hwloc_xml is not None
        why = f"discovery=hwloc (configured{f', from {hwloc_xml}' if simulated else ''})"
        return _TopologyDiscovery("hwloc", locality, simulated, why)
    if preference == "sim":
        return ProfileGpuDiscovery(
            sim_profile,
            node or "node-0",
            reason=f"discovery=sim (configured, profile {sim_profile})",
            labels=labels,
        )
    if preference == "file":
        if inventory_file is None:
            raise DiscoveryError("discovery=file needs an inventory file")
        return FileGpuDiscovery(inventory_file)
    if preference != "auto":
        plugins = _plugins()
        if preference in plugins:
            options = {"node": node, "labels": labels or {}}
            return _load_plugin(preference, options)
        known = ", ".join([*BUILTIN, *sorted(plugins)])
        raise DiscoveryError(f"unknown discovery adapter {preference!r} (known: {known})")
    tried = []
    for name, make in vendors.items():
        adapter = make()
        cap = adapter.capability()
        if not cap.ok:
            tried.append(f"{name}: {cap.status.value} ({cap.detail})")
            continue
        count = adapter.discover().gpu_count
        if count == 0:
            tried.append(f"{name}: loaded but found no GPU")
            continue
        reason = f"auto: {name} found {count} GPU(s)" + (
            f" after {'; '.join(tried)}" if tried else ""
        )
        return JoinedDiscovery(adapter, locality, reason)
    skipped = "; ".join(tried) or "no vendor adapter"
    if inventory_file is not None:
        return _AnnotatedFile(
            inventory_file, f"auto: no GPU found ({skipped}); using {inventory_file}"
        )
    return ProfileGpuDiscovery(
        sim_profile,
        node or "node-0",
        reason=f"auto: no GPU found ({skipped}); using simulated profile {sim_profile}",
        labels=labels,
    )


class _AnnotatedFile:
    """FileGpuDiscovery with the reason for falling back to it in its notes."""

    name = "file"

    def __init__(self, path: str | Path, reason: str) -> None:
        self._inner = FileGpuDiscovery(path)
        self._reason = reason

    def discover(self) -> Inventory:
        inv = self._inner.discover()
        return Inventory(inv.nodes, inv.source, inv.simulated, (self._reason, *inv.notes))
