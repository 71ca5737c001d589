"""GpuController: reconfigures GPUs for sharing, MIG instances and MPS control daemons.

Errors:

GpuControlError
├── ControllerUnavailable   the vendor library or tool is absent (no NVML, no MPS binary)
├── MigNotEnabled           the GPU is not in MIG mode (or does not support MIG)
├── MigPlacementRejected    the driver refused the create (overlap, capacity, bad placement)
└── MpsError                the MPS control daemon failed or answered with an error

Placements are in memory slices (NVML's `nvmlGpuInstancePlacement_t`); profile ids are NVML's
`info.id` (what `nvidia-smi mig -lgip` prints), see `domain.allocation.mig_tables`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

__all__ = [
    "ControllerUnavailable",
    "GpuControlError",
    "GpuController",
    "MigController",
    "MigInstanceInfo",
    "MigNotEnabled",
    "MigPlacementRejected",
    "MpsController",
    "MpsError",
]


class GpuControlError(Exception):
    """Base of every error a GPU controller raises."""


class ControllerUnavailable(GpuControlError):
    """The library or executable the controller drives is not present."""


class MigNotEnabled(GpuControlError):
    """MIG mode is off on this GPU (or the GPU has no MIG)."""


class MigPlacementRejected(GpuControlError):
    """The driver refused to create the instance at that placement."""


class MpsError(GpuControlError):
    """The MPS control daemon could not be started/stopped or rejected a command."""


@dataclass(frozen=True, slots=True)
class MigInstanceInfo:
    """A GPU instance as the device reports it, with the one compute instance we create in
    it. `start`/`size` in memory slices. `uuid` is the MIG device's UUID as NVML reports it
    ("MIG-..."; what CUDA_VISIBLE_DEVICES takes); "" when the instance has no compute
    instance, hence no MIG device."""

    gpu_index: int
    gpu_instance_id: int
    compute_instance_id: int
    profile_id: int
    start: int
    size: int
    uuid: str = ""


@runtime_checkable
class MigController(Protocol):
    """Creates and destroys MIG GPU instances (each with one full-size compute instance).

    `create_mig_instance` returns once the instance exists, or raises MigNotEnabled /
    MigPlacementRejected; `destroy_mig_instance` removes its compute instances then the GPU
    instance (NotFound-like failures raise GpuControlError); `list_mig_instances` reports what
    the device has, sorted by start. Not thread-safe per GPU: callers serialise per GPU.
    """

    def mig_enabled(self, gpu_index: int) -> bool: ...

    def create_mig_instance(
        self, gpu_index: int, profile_id: int, start: int
    ) -> MigInstanceInfo: ...

    def destroy_mig_instance(self, gpu_index: int, gpu_instance_id: int) -> None: ...

    def list_mig_instances(self, gpu_index: int) -> list[MigInstanceInfo]: ...


@runtime_checkable
class MpsController(Protocol):
    """Starts and stops one MPS control daemon per GPU.

    `start_mps` is idempotent (a running daemon is left alone) and returns once the daemon
    accepts commands; `stop_mps` asks it to quit and is idempotent; `mps_running` reports the
    daemon's state. Per-client limits are environment variables set by the job runner
    (`domain.allocation.mps.mps_environment`); `set_default_active_thread_percentage` sets the
    daemon-wide default for clients that set none. Thread-safe.
    """

    def start_mps(self, gpu_index: int) -> None: ...

    def stop_mps(self, gpu_index: int) -> None: ...

    def mps_running(self, gpu_index: int) -> bool: ...

    def set_default_active_thread_percentage(self, gpu_index: int, percentage: int) -> None: ...


@runtime_checkable
class GpuController(MigController, MpsController, Protocol):
    """Both halves together: what the node agent needs to prepare shared GPUs."""
