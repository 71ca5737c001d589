"""Quota accounting with cohorts (Kueue's model), per scheduling cycle.

A tenant's usage is what its running jobs hold plus what this cycle binds. A job is admitted
when its tenant stays within nominal quota, or - when the tenant is in a cohort - when the
excess (borrowed GPUs) stays within the tenant's borrowing limit and the cohort's borrowed
total stays within the idle quota its members lend:

    sum over members m of max(0, used_m - nominal_m)
        <= sum over members m of min(lendable_m, max(0, nominal_m - used_m))

Borrowing and lending are counted in GPUs; CPU and GPU memory quotas are hard caps.
No quotas at all (an empty mapping) means no quota checks. With quotas set, a tenant without
one (`default` included) has no guarantee and no cap: its jobs run on whatever is free and are
admitted as borrowing, so they are preempted for priority like any borrower and reclaimed by
any tenant that needs capacity within its own guarantee.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from gpu_platform.domain.placement.request import MILLI
from gpu_platform.domain.scheduling.model import (
    PendingCode,
    PendingJob,
    PendingReason,
    Quota,
    RunningJob,
)

__all__ = ["QuotaBook", "gpus_text"]


def gpus_text(milli: int) -> str:
    """Milli-GPU as GPUs for messages: 8000 -> '8', 2500 -> '2.5'."""
    return str(milli // MILLI) if milli % MILLI == 0 else f"{milli / MILLI:g}"


class QuotaBook:
    """Usage per tenant (GPU milli, CPU milli, GPU memory bytes) against `quotas`."""

    def __init__(self, quotas: Mapping[str, Quota], running: Iterable[RunningJob]) -> None:
        self.quotas = quotas
        self.gpu: dict[str, int] = {}
        self.cpu: dict[str, int] = {}
        self.gpu_memory: dict[str, int] = {}
        self.members: dict[str, list[str]] = {}
        for tenant, q in sorted(quotas.items()):
            if q.cohort is not None:
                self.members.setdefault(q.cohort, []).append(tenant)
        for job in running if quotas else ():
            self.add(job.tenant, job.gpu_milli, job.total_cpu_milli, job.gpu_memory_bytes)

    @property
    def active(self) -> bool:
        return bool(self.quotas)

    def add(self, tenant: str, gpu: int, cpu: int, gpu_memory: int) -> None:
        self.gpu[tenant] = self.gpu.get(tenant, 0) + gpu
        self.cpu[tenant] = self.cpu.get(tenant, 0) + cpu
        self.gpu_memory[tenant] = self.gpu_memory.get(tenant, 0) + gpu_memory

    def within_guarantee(self, job: PendingJob) -> bool:
        """True when the job fits in its tenant's nominal GPU quota on top of current usage."""
        q = self.quotas.get(job.tenant)
        return q is not None and self.gpu.get(job.tenant, 0) + job.gpu_milli <= q.nominal_milli

    def has_quota(self, tenant: str) -> bool:
        return tenant in self.quotas

    def cohort_of(self, tenant: str) -> str | None:
        q = self.quotas.get(tenant)
        return None if q is None else q.cohort

    def _borrowed(self, tenant: str, used: int) -> int:
        return max(0, used - self.quotas[tenant].nominal_milli)

    def _idle(self, tenant: str, used: int) -> int:
        q = self.quotas[tenant]
        return min(q.lendable_milli, max(0, q.nominal_milli - used))

    def check(self, job: PendingJob) -> PendingReason | bool:
        """A reason the job may not be admitted now, or whether admitting it borrows."""
        if not self.quotas:
            return False
        t = job.tenant
        q = self.quotas.get(t)
        if q is None:
            return True  # no guarantee, no cap: runs on idle capacity as a borrower
        if q.cpu_milli is not None and self.cpu.get(t, 0) + job.cpu_milli > q.cpu_milli:
            return PendingReason(
                PendingCode.QUOTA,
                f"tenant {t} at CPU quota: {self.cpu.get(t, 0)}/{q.cpu_milli} milli-CPU used, "
                f"job needs {job.cpu_milli}",
            )
        if (
            q.gpu_memory_bytes is not None
            and self.gpu_memory.get(t, 0) + job.gpu_memory_bytes > q.gpu_memory_bytes
        ):
            return PendingReason(
                PendingCode.QUOTA,
                f"tenant {t} at GPU memory quota: {self.gpu_memory.get(t, 0)}/"
                f"{q.gpu_memory_bytes} bytes used, job needs {job.gpu_memory_bytes}",
            )
        used = self.gpu.get(t, 0)
        after = used + job.gpu_milli
        if after <= q.nominal_milli:
            return False
        head = (
            f"tenant {t} at quota: {gpus_text(used)}/{q.gpus} GPUs guaranteed, "
            f"job needs {gpus_text(job.gpu_milli)}"
        )
        if q.cohort is None:
            return PendingReason(PendingCode.QUOTA, f"{head}; no cohort to borrow from")
        over = after - q.nominal_milli
        if q.borrowing_limit is not None and over > q.borrowing_limit * MILLI:
            return PendingReason(
                PendingCode.QUOTA,
                f"{head}; borrowing limit {q.borrowing_limit} reached"
                f" (would borrow {gpus_text(over)})",
            )
        borrowed = idle = 0
        for m in self.members[q.cohort]:
            u = after if m == t else self.gpu.get(m, 0)
            borrowed += self._borrowed(m, u)
            idle += self._idle(m, u)
        if borrowed > idle:
            already = borrowed - over + max(0, used - q.nominal_milli)
            return PendingReason(
                PendingCode.QUOTA,
                f"{head}; cohort {q.cohort} lends {gpus_text(idle)} idle GPUs, "
                f"{gpus_text(already)} already borrowed",
            )
        return True
