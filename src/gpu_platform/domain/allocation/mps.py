"""MPS shares: fractional compute (active-thread percentage) and a pinned device-memory limit.

Theory of operation. Under CUDA MPS a client's compute is capped by
`CUDA_MPS_ACTIVE_THREAD_PERCENTAGE` and its device memory by `CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`;
both are read by the CUDA driver when the client starts. Memory cannot be oversubscribed (a GPU
OOM kills the job), so an `MpsLedger` admits a share only while the pinned limits of all shares
on a GPU sum to at most its memory. Compute percentages are caps, not reservations; the ledger
still bounds their sum by `max_compute_percent` (100 by default: no compute oversubscription;
an operator may raise it to let bursty jobs overlap).

`mps_environment(share)` is the pure function the job runner uses to turn a share into the
environment variables it must set (the runner wiring belongs to the composition root).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from gpu_platform.domain.errors import Conflict, InvalidRequest, NotFound

__all__ = ["MIB", "MpsLedger", "MpsShare", "mps_environment"]

MIB = 1 << 20


@dataclass(frozen=True, slots=True)
class MpsShare:
    """One job's share of one GPU: `active_thread_percentage` in 1..100 and
    `pinned_memory_bytes` > 0 (rounded down to whole MiB when exported)."""

    job_id: str
    active_thread_percentage: int
    pinned_memory_bytes: int

    def __post_init__(self) -> None:
        if not self.job_id:
            raise InvalidRequest("job_id", "must be non-empty")
        if not 1 <= self.active_thread_percentage <= 100:
            raise InvalidRequest(
                "active_thread_percentage",
                f"must be in 1..100, got {self.active_thread_percentage}",
            )
        if self.pinned_memory_bytes < MIB:
            raise InvalidRequest(
                "pinned_memory_bytes", f"must be at least 1 MiB, got {self.pinned_memory_bytes}"
            )


@dataclass(frozen=True, slots=True)
class MpsLedger:
    """The MPS shares on one GPU of `memory_bytes` bytes. Immutable: `admit`/`release` return
    a new ledger. Invariant: pinned memory sum <= memory_bytes, percentages sum <=
    max_compute_percent, one share per job."""

    gpu_uuid: str
    memory_bytes: int
    max_compute_percent: int = 100
    shares: tuple[MpsShare, ...] = ()

    @property
    def pinned_bytes(self) -> int:
        return sum(s.pinned_memory_bytes for s in self.shares)

    @property
    def compute_percent(self) -> int:
        return sum(s.active_thread_percentage for s in self.shares)

    @property
    def free_memory_bytes(self) -> int:
        return self.memory_bytes - self.pinned_bytes

    def admits(self, share: MpsShare) -> str | None:
        """None when `share` fits; otherwise why not."""
        if any(s.job_id == share.job_id for s in self.shares):
            return f"job {share.job_id} already has a share on {self.gpu_uuid}"
        if share.pinned_memory_bytes > self.free_memory_bytes:
            return (
                f"pinned memory {share.pinned_memory_bytes} B exceeds the "
                f"{self.free_memory_bytes} B left on {self.gpu_uuid}"
            )
        if self.compute_percent + share.active_thread_percentage > self.max_compute_percent:
            return (
                f"active threads {share.active_thread_percentage}% exceed the "
                f"{self.max_compute_percent - self.compute_percent}% left on {self.gpu_uuid}"
            )
        return None

    def admit(self, share: MpsShare) -> MpsLedger:
        reason = self.admits(share)
        if reason is not None:
            raise Conflict(reason)
        return replace(self, shares=(*self.shares, share))

    def release(self, job_id: str) -> MpsLedger:
        if not any(s.job_id == job_id for s in self.shares):
            raise NotFound("mps share", job_id)
        return replace(self, shares=tuple(s for s in self.shares if s.job_id != job_id))

    def check_invariants(self) -> None:
        assert self.pinned_bytes <= self.memory_bytes, "pinned memory oversubscribed"
        assert self.compute_percent <= self.max_compute_percent, "compute oversubscribed"
        assert len({s.job_id for s in self.shares}) == len(self.shares), "duplicate job share"


def mps_environment(share: MpsShare, device_ordinal: int = 0) -> dict[str, str]:
    """Environment variables the job runner sets for an MPS client holding `share`.

    `device_ordinal` is the device's index as the client sees it (after CUDA_VISIBLE_DEVICES
    remapping, so 0 for a single-GPU job). The memory limit is whole MiB, rounded down so the
    client can never pin more than the ledger admitted.
    """
    if device_ordinal < 0:
        raise InvalidRequest("device_ordinal", f"must be >= 0, got {device_ordinal}")
    return {
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(share.active_thread_percentage),
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": (
            f"{device_ordinal}={share.pinned_memory_bytes // MIB}MB"
        ),
    }
