"""Past-tense domain events. The domain returns them; adapters turn them into logs and metrics."""

from __future__ import annotations

from dataclasses import dataclass

from gpu_platform.domain.access_state import AccessEvent
from gpu_platform.domain.model.gpu import GpuState
from gpu_platform.domain.model.job import Allocation, JobState
from gpu_platform.domain.model.node import NodeState
from gpu_platform.domain.scheduling.model import Quota

__all__ = [
    "ArraySubmitted",
    "AttemptEnded",
    "BatchItemRefused",
    "ClusterEvent",
    "DomainEvent",
    "EccAlertRaised",
    "GpuStateChanged",
    "GpuThermalChanged",
    "HardwareEvent",
    "JobAborted",
    "JobBound",
    "JobCancelled",
    "JobEvent",
    "JobFinished",
    "JobRequeued",
    "JobStarted",
    "JobSubmitted",
    "NodeRegistered",
    "NodeRemoved",
    "NodeStateChanged",
    "QuotaChanged",
    "ServerAnnounced",
    "StaleReportIgnored",
    "XidReported",
]


@dataclass(frozen=True, slots=True)
class JobSubmitted:
    job_id: str
    gpus: int


@dataclass(frozen=True, slots=True)
class ArraySubmitted:
    """Job array `array_id` was created: its tasks `task_ids` are QUEUED, each asking for
    `gpus` GPUs (one event for the whole array, however many tasks)."""

    array_id: str
    task_ids: tuple[str, ...]
    gpus: int


@dataclass(frozen=True, slots=True)
class JobBound:
    job_id: str
    allocation: Allocation
    attempt: int


@dataclass(frozen=True, slots=True)
class JobStarted:
    job_id: str
    epoch: int


@dataclass(frozen=True, slots=True)
class JobFinished:
    """The attempt ended: COMPLETED (exit 0) or FAILED (non-zero exit, signal, launch error)."""

    job_id: str
    epoch: int
    state: JobState
    exit_code: int | None
    reason: str


@dataclass(frozen=True, slots=True)
class JobCancelled:
    """`stop` is the allocation whose process must be stopped, or None if nothing ran."""

    job_id: str
    stop: Allocation | None


@dataclass(frozen=True, slots=True)
class JobRequeued:
    """An attempt was lost or preempted; `stop` is the allocation to stop, if still live."""

    job_id: str
    stop: Allocation | None
    reason: str


@dataclass(frozen=True, slots=True)
class JobAborted:
    """The job failed while its attempt may still run; `stop` is the allocation to stop."""

    job_id: str
    stop: Allocation | None
    reason: str


@dataclass(frozen=True, slots=True)
class AttemptEnded:
    """A stopped attempt's process has ended; its GPUs are free again."""

    job_id: str
    epoch: int
    exit_code: int | None


@dataclass(frozen=True, slots=True)
class StaleReportIgnored:
    """A report from an attempt that is no longer current (fenced by its epoch)."""

    job_id: str
    epoch: int
    reason: str


@dataclass(frozen=True, slots=True)
class BatchItemRefused:
    """Item `index` of a job batch (`domain.job_batches`), a command for job `job_id`, was
    refused (`error`: the refusal's class and message); the state is as if it was never sent."""

    index: int
    job_id: str
    error: str


@dataclass(frozen=True, slots=True)
class GpuStateChanged:
    """A GPU's own (health/admin) state moved; `reason` says why (a fault, an operator)."""

    node: str
    gpu_index: int
    uuid: str
    old: GpuState
    new: GpuState
    reason: str


@dataclass(frozen=True, slots=True)
class NodeStateChanged:
    node: str
    old: NodeState
    new: NodeState
    reason: str


@dataclass(frozen=True, slots=True)
class XidReported:
    """An XID was seen on a GPU and classified (`xid_class` is a `policy.XidClass` value)."""

    node: str
    gpu_index: int
    xid: int
    xid_class: str


@dataclass(frozen=True, slots=True)
class EccAlertRaised:
    """Corrected ECC errors on a GPU crossed the alert threshold."""

    node: str
    gpu_index: int
    corrected: int


@dataclass(frozen=True, slots=True)
class GpuThermalChanged:
    """A GPU got hot (no new placements) or cooled down (placements resume)."""

    node: str
    gpu_index: int
    hot: bool
    temperature_c: float


@dataclass(frozen=True, slots=True)
class NodeRemoved:
    """An operator removed node `node` (it held no work) from the cluster."""

    node: str
    reason: str


@dataclass(frozen=True, slots=True)
class NodeRegistered:
    """A node's agent registered it: new (`replaced` False) or with changed hardware."""

    node: str
    gpus: int
    replaced: bool


@dataclass(frozen=True, slots=True)
class QuotaChanged:
    """A tenant's quota was set (`quota` None: removed)."""

    tenant: str
    quota: Quota | None


@dataclass(frozen=True, slots=True)
class ServerAnnounced:
    """Server `server_id` (a Raft member) serves its APIs at `http_url` and `grpc_address`."""

    server_id: int
    http_url: str
    grpc_address: str


JobEvent = (
    JobSubmitted
    | JobBound
    | JobStarted
    | JobFinished
    | JobCancelled
    | JobRequeued
    | JobAborted
    | AttemptEnded
    | StaleReportIgnored
)

HardwareEvent = (
    GpuStateChanged | NodeStateChanged | XidReported | EccAlertRaised | GpuThermalChanged
)

ClusterEvent = (
    NodeRegistered
    | NodeRemoved
    | QuotaChanged
    | ServerAnnounced
    | ArraySubmitted
    | BatchItemRefused
)

DomainEvent = JobEvent | HardwareEvent | ClusterEvent | AccessEvent
