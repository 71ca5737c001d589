"""Who shares which GPU, and how much CPU each node has promised: the cluster state's index of
fractional holders.

Theory of operation: a whole-GPU job holds its GPUs alone (the state's held index, uuid -> job).
A share (`Job.shares_gpu`: `gpu_milli` < 1000 of one GPU) is recorded here instead, with the
compute it takes (milli-GPU) and the device memory it pins (`sharing.pinned_bytes`). CPU
requests (`JobSpec.cpu_milli`, per task) are summed per node for every job, shared or not.
The book is derived: it always equals `ShareBook.of(jobs holding GPUs)` (the state checks it
in `check_invariants`), so snapshots need not carry it.

`refusal(gpu, job)` says why a share cannot join a GPU now (None when it can): the GPU's
shares would exceed 1000 milli-GPU or its memory. Invariants: per GPU, the shares' milli sum
to at most 1000 and their pinned bytes to at most the GPU's memory (when it reports one).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gpu_platform.domain.errors import InvalidRequest
from gpu_platform.domain.model.gpu import Gpu
from gpu_platform.domain.model.job import Allocation, Job, JobSpec
from gpu_platform.domain.model.sharing import MILLI, effective_sharing, pinned_bytes

__all__ = ["Share", "ShareBook", "check_share_request"]


@dataclass(frozen=True, slots=True)
class Share:
    """One job's share of one GPU: milli-GPU, pinned device memory (bytes) and its mode."""

    job_id: str
    milli: int
    pinned_bytes: int
    sharing: str


class ShareBook:
    """Shares per GPU uuid and CPU milli-cores promised per node (mutable; the state owns it)."""

    def __init__(self) -> None:
        self.gpus: dict[str, dict[str, Share]] = {}  # gpu uuid -> job id -> share
        self.cpu: dict[str, int] = {}  # node -> CPU milli-cores requested by its jobs

    @classmethod
    def of(cls, jobs: Iterable[Job], gpus: Mapping[str, Gpu]) -> ShareBook:
        """The book of `jobs` (those that hold GPUs count); `gpus` by uuid."""
        book = cls()
        for job in jobs:
            if job.holds_gpus:
                book.hold(job, gpus)
        return book

    @staticmethod
    def share_of(job: Job, gpu: Gpu) -> Share:
        spec = job.spec
        pinned = pinned_bytes(spec.gpu_milli, spec.gpu_memory_bytes, gpu.memory_bytes)
        return Share(job.id, spec.gpu_milli, pinned, effective_sharing(spec.sharing, gpu.vendor))

    def hold(self, job: Job, gpus: Mapping[str, Gpu]) -> None:
        """Record what `job`'s allocation takes (its shares, its CPU on each task's node)."""
        assert job.allocation is not None
        if job.spec.cpu_milli:
            for slot in job.allocation.tasks:
                self.cpu[slot.node] = self.cpu.get(slot.node, 0) + job.spec.cpu_milli
        if job.shares_gpu:
            for uuid in job.allocation.all_gpu_uuids:
                gpu = gpus.get(uuid)
                if gpu is not None:  # a GPU that left the inventory holds nothing
                    self.gpus.setdefault(uuid, {})[job.id] = self.share_of(job, gpu)

    def unhold(self, job: Job, allocation: Allocation) -> None:
        """Forget what `hold` recorded for `job`'s attempt on `allocation`."""
        if job.spec.cpu_milli:
            for slot in allocation.tasks:
                left = self.cpu.get(slot.node, 0) - job.spec.cpu_milli
                if left > 0:
                    self.cpu[slot.node] = left
                else:
                    self.cpu.pop(slot.node, None)
        if job.shares_gpu:
            for uuid in allocation.all_gpu_uuids:
                shares = self.gpus.get(uuid)
                if shares is not None and shares.pop(job.id, None) is not None and not shares:
                    del self.gpus[uuid]

    def sharers(self, uuid: str) -> tuple[str, ...]:
        """Ids of the jobs sharing GPU `uuid` (empty when none)."""
        return tuple(self.gpus.get(uuid, ()))

    def shares(self, uuid: str) -> tuple[Share, ...]:
        return tuple(self.gpus.get(uuid, {}).values())

    def used_milli(self, uuid: str) -> int:
        return sum(s.milli for s in self.gpus.get(uuid, {}).values())

    def pinned(self, uuid: str) -> int:
        return sum(s.pinned_bytes for s in self.gpus.get(uuid, {}).values())

    def free_milli(self, gpu: Gpu) -> int:
        """Milli-GPU still free on `gpu` for another share: compute left, and no more than
        its memory left allows (pinned memory as a fraction of the GPU)."""
        free = MILLI - self.used_milli(gpu.uuid)
        if gpu.memory_bytes > 0 and gpu.uuid in self.gpus:
            left = gpu.memory_bytes - self.pinned(gpu.uuid)
            free = min(free, left * MILLI // gpu.memory_bytes)
        return max(0, free)

    def refusal(self, gpu: Gpu, job: Job) -> str | None:
        """Why `job`'s share cannot join `gpu` now; None when it fits."""
        share = self.share_of(job, gpu)
        used = self.used_milli(gpu.uuid)
        if used + share.milli > MILLI:
            return f"its shares already take {used} of {MILLI} milli-GPU"
        pinned = self.pinned(gpu.uuid)
        if gpu.memory_bytes > 0 and pinned + share.pinned_bytes > gpu.memory_bytes:
            return (
                f"{pinned} of its {gpu.memory_bytes} bytes are pinned by shares; "
                f"{share.pinned_bytes} more do not fit"
            )
        return None

    def check(self, gpus: Mapping[str, Gpu]) -> None:
        """Raise AssertionError unless every GPU's shares fit its compute and memory."""
        for uuid, shares in self.gpus.items():
            assert shares, f"empty share record kept for {uuid}"
            assert self.used_milli(uuid) <= MILLI, f"{uuid} compute shares above {MILLI}"
            gpu = gpus.get(uuid)
            if gpu is not None and gpu.memory_bytes > 0:
                assert self.pinned(uuid) <= gpu.memory_bytes, f"{uuid} pinned memory oversubscribed"
        assert all(v > 0 for v in self.cpu.values()), "zero CPU record kept"

    def same_as(self, other: ShareBook) -> bool:
        return self.gpus == other.gpus and self.cpu == other.cpu


def check_share_request(spec: JobSpec, gpus: Iterable[Gpu]) -> None:
    """Refuse (InvalidRequest naming the field) what no GPU of the cluster could ever host: a
    vendor it has none of, more device memory than its largest GPU has."""
    if not spec.gpus:
        return
    pool = [g for g in gpus if spec.vendor is None or g.vendor == spec.vendor]
    if spec.vendor is not None and not pool:
        raise InvalidRequest("vendor", f"no {spec.vendor} GPU in the cluster; it could never run")
    largest = max((g.memory_bytes for g in pool), default=0)
    if spec.gpu_memory_bytes is not None and largest and spec.gpu_memory_bytes > largest:
        raise InvalidRequest(
            "gpu_memory_bytes",
            f"asks {spec.gpu_memory_bytes} bytes but the largest GPU has {largest}; "
            "it could never be placed",
        )
