"""GpuDiscovery: where the inventory of nodes and GPUs comes from."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from gpu_platform.domain.model.node import Inventory

__all__ = ["DiscoveryError", "GpuDiscovery"]


class DiscoveryError(Exception):
    """Discovery could not produce an inventory (bad inventory file, vendor library failure)."""


@runtime_checkable
class GpuDiscovery(Protocol):
    """Reports the nodes and GPUs this process manages.

    `discover()` returns a complete Inventory (possibly with zero GPUs) or raises DiscoveryError
    naming the cause. Calling it twice on unchanged hardware returns equal inventories (ids are
    stable). Not required to be thread-safe.
    """

    name: str

    def discover(self) -> Inventory: ...
