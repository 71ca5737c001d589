"""Health findings as health monitors report them (value objects, no judgement yet).

A monitor turns vendor events and polled counters into these; the control plane turns them
into cluster-state commands, where `policy` judges them. GPUs are named by node and the
node-local index. ECC counts are volatile totals (since the driver loaded).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "EccReading",
    "GpuLostReport",
    "HealthEvent",
    "Heartbeat",
    "ReplicaProbe",
    "ThermalReading",
    "XidReport",
]


@dataclass(frozen=True, slots=True)
class XidReport:
    node: str
    gpu_index: int
    xid: int


@dataclass(frozen=True, slots=True)
class EccReading:
    node: str
    gpu_index: int
    corrected: int
    uncorrected: int
    remap_pending: bool = False
    remap_failed: bool = False


@dataclass(frozen=True, slots=True)
class ThermalReading:
    """`temperature_c` in °C; `clock_reasons` is NVML's clock-event reason bitmask."""

    node: str
    gpu_index: int
    temperature_c: float
    clock_reasons: int = 0


@dataclass(frozen=True, slots=True)
class GpuLostReport:
    node: str
    gpu_index: int
    detail: str = "GPU is lost"


@dataclass(frozen=True, slots=True)
class Heartbeat:
    node: str


@dataclass(frozen=True, slots=True)
class ReplicaProbe:
    """A service replica's health check changed (attempt `epoch` of job `job_id`): `ready`,
    where it listens (`address`, ``http://host:port``) and why it is not ready (`detail`)."""

    node: str
    job_id: str
    epoch: int
    ready: bool
    address: str
    detail: str = ""


HealthEvent = XidReport | EccReading | ThermalReading | GpuLostReport | Heartbeat | ReplicaProbe
