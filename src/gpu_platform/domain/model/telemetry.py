"""Capabilities and telemetry readings reported by discovery adapters.

A vendor call that the hardware or driver does not support yields a `Capability` with status
NOT_SUPPORTED and a reading of None - never an exception. A library that is not installed
yields ABSENT; a call that failed for another reason yields DEGRADED with the error text.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = ["Capability", "CapabilityStatus", "GpuReading", "RemappedRows", "TelemetrySnapshot"]


class CapabilityStatus(enum.StrEnum):
    SUPPORTED = "supported"
    NOT_SUPPORTED = "not-supported"
    DEGRADED = "degraded"
    ABSENT = "absent"


@dataclass(frozen=True, slots=True)
class Capability:
    """What one adapter can do: `name` like `nvml`, `nvml.utilization` or `gpu3.ecc`."""

    name: str
    status: CapabilityStatus
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.status is CapabilityStatus.SUPPORTED


@dataclass(frozen=True, slots=True)
class RemappedRows:
    """NVML row remapping (Ampere+): counts, a remap pending a reset, a failed remap."""

    correctable: int
    uncorrectable: int
    pending: bool
    failed: bool


@dataclass(frozen=True, slots=True)
class GpuReading:
    """One GPU's telemetry. None = unknown or not supported (see the snapshot's capabilities).

    Units: percent, bytes, degrees Celsius, milliwatts, MHz, millijoules, ratios 0..1.
    """

    uuid: str
    index: int
    utilization_pct: int | None = None
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    temperature_c: int | None = None
    power_mw: int | None = None
    sm_clock_mhz: int | None = None
    clock_event_reasons: tuple[str, ...] | None = None
    ecc_corrected: int | None = None
    ecc_uncorrected: int | None = None
    remapped_rows: RemappedRows | None = None
    mig_enabled: bool | None = None
    mig_profiles: tuple[str, ...] = ()
    mem_clock_mhz: int | None = None
    memory_util_pct: int | None = None  # memory-controller busy time (NVML `util.memory`)
    energy_mj: int | None = None  # total since the driver loaded, millijoules
    pcie_replays: int | None = None
    last_xid: int | None = None  # 0 = none seen
    # Profiling ratios (0..1): DCGM profiling only, never NVML; simulated GPUs derive them
    # from their simulated utilization. None on real GPUs.
    gr_engine_active: float | None = None
    tensor_active: float | None = None


@dataclass(frozen=True, slots=True)
class TelemetrySnapshot:
    """Readings for every GPU of `node` plus the capabilities that explain the gaps."""

    node: str
    source: str
    gpus: tuple[GpuReading, ...]
    capabilities: tuple[Capability, ...] = ()

    def capability(self, name: str) -> Capability | None:
        for c in self.capabilities:
            if c.name == name:
                return c
        return None
