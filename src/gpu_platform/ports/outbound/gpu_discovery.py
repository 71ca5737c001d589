"""GpuDiscovery: where the inventory of nodes and GPUs comes from; GpuTelemetry: their readings.

Errors: DiscoveryError (an inventory could not be produced at all). A vendor call that is not
supported, or a vendor library that is absent, is not an error: adapters report it as a
`Capability` in the Inventory or TelemetrySnapshot and carry on.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from gpu_platform.domain.model.node import Inventory
from gpu_platform.domain.model.telemetry import TelemetrySnapshot

__all__ = ["DiscoveryError", "GpuDiscovery", "GpuTelemetry"]


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


@runtime_checkable
class GpuTelemetry(Protocol):
    """Reads a telemetry snapshot of the GPUs `discover()` reported.

    `snapshot()` never raises for a vendor call the hardware does not support: the reading is
    None and a Capability says why. It returns one reading per discovered GPU, in index order.
    """

    name: str

    def snapshot(self) -> TelemetrySnapshot: ...
