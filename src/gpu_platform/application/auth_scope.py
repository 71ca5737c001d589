"""One principal's view of the JobService, and the audit trail of mutating calls.

`TenantScope(inner, principal, trail)` is a JobService that shows a principal only what its
role allows: a user sees and acts on jobs of its own tenant only — another tenant's job is
`NotFound`, exactly as an unknown id, and its id is left out of GPU listings, so ids of other
tenants are not disclosed — and submits into its own tenant (asking for another is Forbidden).
Operators and admins see every tenant. Every mutating call (submit, cancel, kill) is appended
to the audit chain with its outcome.

`AuditedHardwareStore` wraps a HardwareStore so that operator actions recorded through
`append_audit` also go to the audit chain, keeping the existing audit API as it is.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import TypeVar

from gpu_platform.domain.errors import DomainError, NotFound
from gpu_platform.domain.faults.commands import HardwareRecord
from gpu_platform.domain.model.audit import AuditRecord
from gpu_platform.domain.model.job import Job, JobSpec
from gpu_platform.domain.model.job_array import ArraySpec
from gpu_platform.domain.model.tenancy import Forbidden, Permission, Principal
from gpu_platform.domain.scheduling.model import PendingReason
from gpu_platform.ports.inbound.job_service import ArrayInfo, ClusterStatus, GpuInfo, JobService
from gpu_platform.ports.outbound.audit_log import AuditLog
from gpu_platform.ports.outbound.clock import Clock
from gpu_platform.ports.outbound.hardware_store import HardwareStore

__all__ = ["AuditTrail", "AuditedHardwareStore", "TenantScope"]

T = TypeVar("T")


class AuditTrail:
    """Appends `{at, actor, tenant, role, action, target, reason, outcome}` to the chain."""

    def __init__(self, log: AuditLog | None = None, clock: Clock | None = None) -> None:
        if log is not None and clock is None:
            raise ValueError("an audit trail with a log needs a clock")
        self._log = log
        self._clock = clock

    def record(
        self, who: Principal, action: str, target: str, outcome: str, reason: str = ""
    ) -> None:
        if self._log is None or self._clock is None:
            return
        self._log.append(
            {
                "at": self._clock.now(),
                "actor": who.name,
                "tenant": who.tenant,
                "role": str(who.role),
                "action": action,
                "target": target,
                "reason": reason,
                "outcome": outcome,
            }
        )

    def around(self, who: Principal, action: str, target: str, fn: Callable[[], T]) -> T:
        """Run `fn`, recording "ok" or "refused: <error>"; re-raises."""
        try:
            result = fn()
        except DomainError as exc:
            self.record(who, action, target, f"refused: {exc}")
            raise
        self.record(who, action, target, "ok")
        return result


class TenantScope:
    def __init__(self, inner: JobService, principal: Principal, trail: AuditTrail) -> None:
        self._inner = inner
        self.principal = principal
        self._trail = trail

    def _visible(self, job: Job) -> bool:
        return self.principal.sees_tenant(job.spec.tenant)

    def _own(self, job_id: str) -> Job:
        self.principal.require(Permission.JOBS_READ)
        job = self._inner.get(job_id)
        if not self._visible(job):
            raise NotFound("job", job_id)
        return job

    def submit(self, spec: JobSpec) -> Job:
        who = self.principal

        def submit() -> Job:
            who.require(Permission.JOBS_WRITE)
            if not who.sees_tenant(spec.tenant):
                raise Forbidden(
                    f"principal {who.name!r} of tenant {who.tenant!r} may not submit as "
                    f"tenant {spec.tenant!r}"
                )
            return self._inner.submit(spec)

        try:
            job = submit()
        except DomainError as exc:
            self._trail.record(who, "job.submit", f"tenant {spec.tenant}", f"refused: {exc}")
            raise
        self._trail.record(who, "job.submit", f"job {job.id}", "ok", f"tenant {spec.tenant}")
        return job

    def get(self, job_id: str) -> Job:
        return self._own(job_id)

    def list_jobs(self, state: str | None = None) -> list[Job]:
        self.principal.require(Permission.JOBS_READ)
        return [j for j in self._inner.list_jobs(state) if self._visible(j)]

    def cancel(self, job_id: str, reason: str = "cancelled by user") -> Job:
        def cancel() -> Job:
            self._own(job_id)
            self.principal.require(Permission.JOBS_WRITE)
            return self._inner.cancel(job_id, reason)

        return self._trail.around(self.principal, "job.cancel", f"job {job_id}", cancel)

    def why(self, job_id: str) -> PendingReason | None:
        self._own(job_id)
        return self._inner.why(job_id)

    def kill(self, job_id: str, reason: str = "killed by user") -> Job:
        def kill() -> Job:
            self._own(job_id)
            self.principal.require(Permission.JOBS_WRITE)
            return self._inner.kill(job_id, reason)

        return self._trail.around(self.principal, "job.kill", f"job {job_id}", kill)

    def logs(
        self, job_id: str, attempt: int | None = None, tail_bytes: int = 65536, rank: int = 0
    ) -> str:
        self._own(job_id)
        return self._inner.logs(job_id, attempt, tail_bytes, rank)

    def log_from(
        self, job_id: str, attempt: int, offset: int, max_bytes: int = 65536, rank: int = 0
    ) -> tuple[bytes, bool]:
        self._own(job_id)
        return self._inner.log_from(job_id, attempt, offset, max_bytes, rank)

    def gpus(self) -> list[GpuInfo]:
        """Every GPU; for a user, the id of another tenant's job on a GPU is left out."""
        self.principal.require(Permission.CLUSTER_READ)
        infos = self._inner.gpus()
        if self.principal.may(Permission.JOBS_ANY_TENANT):
            return infos
        visible = {j.id for j in self.list_jobs()}
        return [
            i if i.job_id is None or i.job_id in visible else dataclasses.replace(i, job_id=None)
            for i in infos
        ]

    def status(self) -> ClusterStatus:
        self.principal.require(Permission.CLUSTER_READ)
        return self._inner.status()

    def submit_array(self, spec: JobSpec, array: ArraySpec | str) -> ArrayInfo:
        """As `submit`: the caller's tenant rules apply to every task."""
        who = self.principal

        def submit() -> ArrayInfo:
            who.require(Permission.JOBS_WRITE)
            if not who.sees_tenant(spec.tenant):
                raise Forbidden(
                    f"principal {who.name!r} of tenant {who.tenant!r} may not submit as "
                    f"tenant {spec.tenant!r}"
                )
            return self._inner.submit_array(spec, array)

        try:
            info = submit()
        except DomainError as exc:
            self._trail.record(who, "array.submit", f"tenant {spec.tenant}", f"refused: {exc}")
            raise
        target = f"array {info.id} ({info.array.count} tasks)"
        self._trail.record(who, "array.submit", target, "ok", f"tenant {spec.tenant}")
        return info

    def _own_array(self, array_id: str) -> ArrayInfo:
        self.principal.require(Permission.JOBS_READ)
        info = self._inner.get_array(array_id)
        if not self.principal.sees_tenant(info.spec.tenant):
            raise NotFound("array", array_id)
        return info

    def get_array(self, array_id: str) -> ArrayInfo:
        return self._own_array(array_id)

    def cancel_array(self, array_id: str, reason: str = "cancelled by user") -> ArrayInfo:
        def cancel() -> ArrayInfo:
            self._own_array(array_id)
            self.principal.require(Permission.JOBS_WRITE)
            return self._inner.cancel_array(array_id, reason)

        return self._trail.around(self.principal, "array.cancel", f"array {array_id}", cancel)


class AuditedHardwareStore:
    """A HardwareStore whose `append_audit` also appends to the audit chain."""

    def __init__(self, inner: HardwareStore, log: AuditLog) -> None:
        self._inner = inner
        self._log = log

    def save_hardware(self, records: Sequence[HardwareRecord]) -> None:
        self._inner.save_hardware(records)

    def load_hardware(self) -> list[HardwareRecord]:
        return self._inner.load_hardware()

    def append_audit(self, record: AuditRecord) -> None:
        self._inner.append_audit(record)
        self._log.append(
            {
                "at": record.at,
                "actor": record.actor,
                "action": record.action,
                "target": record.target,
                "reason": record.reason,
                "outcome": record.outcome,
            }
        )

    def audit(self, limit: int = 100) -> list[AuditRecord]:
        return self._inner.audit(limit)
