"""Contract suites: subclass one per adapter, provide its fixtures, and pytest runs the promises
of the port against it. Real adapters and the fakes in `gpu_platform.testing.fakes` pass the
same suites."""

from gpu_platform.testing.contracts.gpu_discovery import GpuDiscoveryContract
from gpu_platform.testing.contracts.job_runner import JobRunnerContract, RunnerKit
from gpu_platform.testing.contracts.job_store import JobStoreContract

__all__ = ["GpuDiscoveryContract", "JobRunnerContract", "JobStoreContract", "RunnerKit"]
