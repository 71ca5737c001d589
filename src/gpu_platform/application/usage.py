"""UsageService: GPU-hour accounting over the jobs the JobService knows."""

from __future__ import annotations

from gpu_platform.application.gateway.ledger import ServingLedger
from gpu_platform.domain.accounting import gpus_used, running_seconds
from gpu_platform.domain.errors import InvalidRequest
from gpu_platform.ports.inbound.job_service import JobService
from gpu_platform.ports.inbound.usage import JobUsage, UsageReport
from gpu_platform.ports.outbound.clock import Clock

__all__ = ["UsageService"]


class UsageService:
    """Implements UsageQueries."""

    def __init__(
        self, jobs: JobService, clock: Clock, serving: ServingLedger | None = None
    ) -> None:
        self._jobs = jobs
        self._clock = clock
        self._serving = serving

    def usage(
        self, tenant: str | None = None, since: float | None = None, until: float | None = None
    ) -> UsageReport:
        end = self._clock.now() if until is None else until
        start = 0.0 if since is None else since
        if end < start:
            raise InvalidRequest("since", f"window ends ({end}) before it starts ({start})")
        rows = []
        by_tenant: dict[str, float] = {}
        for job in self._jobs.list_jobs():
            if tenant is not None and job.spec.tenant != tenant:
                continue
            seconds = running_seconds(job, start, end)
            if seconds <= 0:
                continue
            gpu_s = gpus_used(job) * seconds  # a share of one GPU: its fraction
            rows.append(JobUsage(job.id, job.spec.tenant, job.spec.gpus, seconds, gpu_s))
            by_tenant[job.spec.tenant] = by_tenant.get(job.spec.tenant, 0.0) + gpu_s / 3600
        serving = {} if self._serving is None else self._serving.by_tenant(tenant)
        return UsageReport(start, end, tuple(rows), by_tenant, serving)
