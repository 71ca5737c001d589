"""Linux sysfs adapters: PCI/NUMA topology, vendor-neutral GPU inventory, NICs."""

from gpu_platform.adapters.outbound.sysfs.adapters import (
    SysfsFabricDiscovery,
    SysfsGpuDiscovery,
    SysfsTopologyProbe,
)
from gpu_platform.adapters.outbound.sysfs.scan import parse_cpulist, scan_sysfs

__all__ = [
    "SysfsFabricDiscovery",
    "SysfsGpuDiscovery",
    "SysfsTopologyProbe",
    "parse_cpulist",
    "scan_sysfs",
]
