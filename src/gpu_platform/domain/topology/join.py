"""Join a vendor library's view (identity, NVLink/XGMI, measured PCIe levels) with the host's
locality view (hwloc or sysfs: packages, NUMA, the PCIe tree, NICs)."""

from __future__ import annotations

from dataclasses import replace

from gpu_platform.domain.model.topology import GpuSite, HostTopology, normalize_bus_id
from gpu_platform.domain.topology.pcie import PciIndex

__all__ = ["join_topologies"]


def join_topologies(vendor: HostTopology, locality: HostTopology) -> HostTopology:
    """The locality topology with the vendor's GPUs, links and measured levels laid over it.

    GPUs are matched by PCI bus id. The vendor's index, UUID, model and memory win; NUMA
    comes from the vendor when it knows it, else from the locality tree. GPUs the locality
    view sees but the vendor does not (another vendor's cards) are kept after the vendor's.
    """
    index = PciIndex(locality)
    local = {normalize_bus_id(g.pci_bus_id): g for g in locality.gpus}
    gpus: list[GpuSite] = []
    for g in sorted(vendor.gpus, key=lambda g: g.index):
        bus = normalize_bus_id(g.pci_bus_id)
        there = local.pop(bus, None)
        numa = g.numa_node
        if numa < 0:
            numa = (
                there.numa_node
                if there is not None and there.numa_node >= 0
                else index.numa_of(bus)
            )
        gpus.append(replace(g, pci_bus_id=bus, numa_node=numa))
    next_index = max((g.index for g in gpus), default=-1) + 1
    for k, g in enumerate(sorted(local.values(), key=lambda g: g.pci_bus_id)):
        gpus.append(replace(g, index=next_index + k))
    known = {p.id for p in locality.pci}
    extra = tuple(p for p in vendor.pci if p.id not in known)
    return replace(
        locality,
        source=f"{vendor.source}+{locality.source}",
        pci=locality.pci + extra,
        gpus=tuple(gpus),
        links=vendor.links,
        measured_levels=vendor.measured_levels,
        notes=locality.notes + vendor.notes,
    )
