"""Simulated hardware: inventories for machines without GPUs, tests and the simulator."""

from gpu_platform.adapters.outbound.sim.health import SimulatedHardware, parse_script
from gpu_platform.adapters.outbound.sim.inventory import (
    FileGpuDiscovery,
    SimulatedGpuDiscovery,
    default_node,
    load_inventory_file,
)

__all__ = [
    "FileGpuDiscovery",
    "SimulatedGpuDiscovery",
    "SimulatedHardware",
    "default_node",
    "load_inventory_file",
    "parse_script",
]
