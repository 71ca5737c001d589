"""Contract suites: one per outbound port, run against every adapter and its fake.

Subclass a suite in a `Test...` class and implement `make()`:

    class TestMyDiscovery(GpuDiscoveryContract):
        def make(self) -> GpuDiscovery:
            return MyDiscovery(...)
"""

from gpu_platform.testing.contracts.discovery import GpuDiscoveryContract, GpuTelemetryContract
from gpu_platform.testing.contracts.topology import FabricDiscoveryContract, TopologyProbeContract

__all__ = [
    "FabricDiscoveryContract",
    "GpuDiscoveryContract",
    "GpuTelemetryContract",
    "TopologyProbeContract",
]
