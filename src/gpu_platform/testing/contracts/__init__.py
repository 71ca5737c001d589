"""Contract suites: subclass one per adapter, provide its fixtures, and pytest runs the promises
of the port against it. Real adapters and the fakes in `gpu_platform.testing.fakes` pass the
same suites.

One convention for every suite: override, in the subclass, the pytest fixture the suite names.
Discovery ports take the adapter itself: GpuDiscoveryContract `discovery`,
GpuTelemetryContract `telemetry` (an adapter that is also a GpuDiscovery),
TopologyProbeContract `probe`, FabricDiscoveryContract `fabric_discovery`. Stores take a
factory that reopens the same data when called again: JobStoreContract, HardwareStoreContract,
QuotaStoreContract and AccessStoreContract `make_store`, RaftStorageContract `make_storage`.
JobRunnerContract `kit` (a RunnerKit), GpuResetContract `reset_kit` (a ResetKit).
"""

from gpu_platform.testing.contracts.fabric_discovery import FabricDiscoveryContract
from gpu_platform.testing.contracts.gpu_discovery import GpuDiscoveryContract
from gpu_platform.testing.contracts.gpu_reset import GpuResetContract, ResetKit
from gpu_platform.testing.contracts.gpu_telemetry import GpuTelemetryContract
from gpu_platform.testing.contracts.hardware_store import HardwareStoreContract
from gpu_platform.testing.contracts.job_runner import JobRunnerContract, RunnerKit
from gpu_platform.testing.contracts.job_store import JobStoreContract
from gpu_platform.testing.contracts.raft_storage import RaftStorageContract
from gpu_platform.testing.contracts.topology_probe import TopologyProbeContract

__all__ = [
    "FabricDiscoveryContract",
    "GpuDiscoveryContract",
    "GpuResetContract",
    "GpuTelemetryContract",
    "HardwareStoreContract",
    "JobRunnerContract",
    "JobStoreContract",
    "RaftStorageContract",
    "ResetKit",
    "RunnerKit",
    "TopologyProbeContract",
]
